"""`mnemoflow up`: start the embedded servers (unless URLs are given), migrate, run every process and keep them
running (`supervisor.py`), stop all of them cleanly; `mnemoflow down`."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from infra.embedded import EmbeddedPostgres, EmbeddedRedis, port_is_free
from infra.migrate import upgrade
from infra.processes import WORK_QUEUES, gateway_command, sweeper_command, worker_command
from services.cli.children import (
    Child,
    PostgresChild,
    ProcessChild,
    RecordedChild,
    ValkeyChild,
    process_started,
    stop_all,
)
from services.cli.supervisor import Supervisor
from shared.config import Settings
from shared.config.secrets import PRIVATE_DIR, kept_secret, private_dir
from shared.config.server import SECRET_FILES, SECRET_VARIABLES, SECRETS_DIR
from shared.db import schema_session
from shared.embedding.factory import create_embedder, create_sector_embedders
from shared.errors import MnemoflowError
from shared.storage.sector_models import ensure_store_model_for

STATE_FILE = "stack.json"
DEFAULT_EMBEDDED_REDIS_PORT = 6390
FLOWER_HOST = "127.0.0.1"
SERVERS = ("valkey", "postgres")  # stopped after the processes that use them
SUPERVISOR_GRACE = 60.0  # `mnemoflow down` waits this long for the supervisor to stop the stack
DEFAULT_WORKER_METRICS_PORT = 9540  # the worker's; the sweeper's is the next one


@dataclass
class Stack:
    settings: Settings
    with_flower: bool = True
    with_beat: bool = True
    echo: bool = True
    children: dict[str, Child] = field(default_factory=dict)  # in start order: servers, then processes
    postgres: EmbeddedPostgres | None = None
    redis: EmbeddedRedis | None = None
    database_url: str = ""
    redis_url: str = ""

    @property
    def data_dir(self) -> Path:
        return self.settings.data_dir.resolve()

    def say(self, message: str) -> None:
        if self.echo:
            print(message, flush=True)

    def start_servers(self) -> None:
        """Use DATABASE_URL / REDIS_URL when set; otherwise start the embedded servers in the data dir."""
        private_dir(self.data_dir)
        if self.settings.database_url:
            self.database_url = self.settings.database_url
            self.say("PostgreSQL: using DATABASE_URL (nothing embedded started)")
        else:
            self.postgres = EmbeddedPostgres(self.data_dir / "pgdata")
            self.database_url = self.postgres.start()
            self.children["postgres"] = PostgresChild(self.postgres)
            # Run as root, pgserver starts PostgreSQL as a user of its own and opens every directory above pgdata
            # to others (g+rx,o+rx) so it can reach it: it needs to traverse the data dir, nobody needs to list it.
            os.chmod(self.data_dir, 0o711 if os.geteuid() == 0 else PRIVATE_DIR)
            self.say(f"PostgreSQL 18 + pgvector (embedded): {self.data_dir / 'pgdata'}")
        if self.settings.redis_url:
            self.redis_url = self.settings.redis_url
            self.say("Redis: using REDIS_URL (nothing embedded started)")
        else:
            port = DEFAULT_EMBEDDED_REDIS_PORT if port_is_free(DEFAULT_EMBEDDED_REDIS_PORT) else 0
            self.redis = EmbeddedRedis(self.data_dir / "valkey", port=port)
            self.redis_url = self.redis.start()
            self.children["valkey"] = ValkeyChild(self.redis)
            self.say(f"Valkey (embedded): {self.redis_url}")
        if self.children:
            self.write_state()

    def migrate(self) -> None:
        upgrade(self.database_url)
        self.say("schema: migrations applied")

    def check_embedding_model(self) -> None:
        """Load the configured model once and refuse a store whose vectors came from another one."""
        settings = self.settings.model_copy(update={"database_url": self.database_url})
        embedder = create_embedder(settings)
        try:
            with schema_session(settings, "mnemoflow.launcher") as session:
                ensure_store_model_for(session, create_sector_embedders(settings, embedder), settings)
        except MnemoflowError as exc:
            raise RuntimeError(exc.message) from exc
        self.say(f"embeddings: {embedder.name} ({embedder.model}, {embedder.dim} dimensions)")

    def child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["DATABASE_URL"] = self.database_url
        env["REDIS_URL"] = self.redis_url
        env["MNEMOFLOW_DATA_DIR"] = str(self.data_dir)
        # The stack's own secrets, made once in the data dir, unless the environment gives them: so its processes
        # agree on them in every environment (outside development each process requires them).
        for setting, variable in SECRET_VARIABLES.items():
            if not env.get(variable, "").strip():
                env[variable] = kept_secret(self.data_dir / SECRETS_DIR, SECRET_FILES[setting])
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    @property
    def metrics_ports(self) -> dict[str, int]:
        """The worker's and the sweeper's Prometheus ports (none when MNEMOFLOW_WORKER_METRICS_PORT is 0)."""
        port = self.settings.worker_metrics_port
        if port == 0:
            return {}
        first = port or DEFAULT_WORKER_METRICS_PORT
        return {"worker": first, "sweeper": first + 1}

    def worker_env(self, name: str) -> dict[str, str]:
        """A Celery worker child's own metrics port and directory (each worker needs both to itself)."""
        port = self.metrics_ports.get(name)
        if port is None:
            return {"MNEMOFLOW_WORKER_METRICS_PORT": "0"}
        return {
            "MNEMOFLOW_WORKER_METRICS_PORT": str(port),
            "MNEMOFLOW_WORKER_METRICS_DIR": str(self.data_dir / "metrics" / name),
        }

    def spawn(
        self, name: str, args: list[str], grace: float, env: dict[str, str] | None = None, without: tuple[str, ...] = ()
    ) -> None:
        environment = {k: v for k, v in {**self.child_env(), **(env or {})}.items() if k not in without}
        child = ProcessChild(name, args, environment, self.data_dir / "logs" / f"{name}.log", grace=grace)
        self.children[name] = child
        child.start()

    def start_processes(self) -> None:
        s = self.settings
        # The grace is how long each may take to stop: the worker finishes its running tasks.
        self.spawn(
            "worker",
            worker_command(
                concurrency=s.worker_concurrency, name="mnemoflow-all", queues=WORK_QUEUES, log_level=s.log_level
            ),
            grace=30,
            env=self.worker_env("worker"),
        )
        self.spawn(
            "sweeper",
            sweeper_command(name="mnemoflow-sweep", log_level=s.log_level),
            grace=10,
            env=self.worker_env("sweeper"),
        )
        if self.with_beat:
            schedule = str(self.data_dir / "celerybeat-schedule")
            self.spawn("beat", ["celery", "-A", "workers.app", "beat", "--loglevel", s.log_level, "-s", schedule], 10)
        # MNEMOFLOW_GATEWAY_WORKERS processes; their metrics files beside the workers' (docs/scaling.md#many-clients)
        metrics_dir = s.gateway_metrics_dir or self.data_dir / "metrics" / "gateway"
        gateway_metrics = {"MNEMOFLOW_GATEWAY_METRICS_DIR": str(metrics_dir)}
        # The worker's processes and the sweeper's share the database: the gateway counts their connections too.
        command = gateway_command(
            host=s.host, port=s.port, log_level=s.log_level, beside_worker_processes=s.worker_concurrency + 1
        )
        self.spawn("gateway", command, grace=10, env=gateway_metrics)
        if self.with_flower:
            # Flower has no authentication: loopback only, whatever HOST the gateway listens on.
            # workers.flower: Flower with its /metrics and /healthcheck behind its login too.
            flower = ["workers.flower", f"--port={s.flower_port}", f"--address={FLOWER_HOST}"]
            # It sends no task: it needs no signing key (docs/security.md#the-broker).
            self.spawn("flower", flower, grace=5, without=("MNEMOFLOW_SIGNING_KEY",))
        self.write_state()

    def write_state(self) -> None:
        """What `mnemoflow down` needs, rewritten whenever a child gets a new pid."""
        state = {
            "supervisor_pid": os.getpid(),
            "supervisor_started": process_started(os.getpid()),
            "children": {name: child.record() for name, child in self.children.items()},
            "gateway": self.gateway_url,
            "flower": self.flower_url if self.with_flower else None,
            "metrics": self.metrics_urls,
            "redis_url": self.redis_url,
            "pgdata": str(self.data_dir / "pgdata") if self.postgres else None,
        }
        path = self.data_dir / STATE_FILE
        partial = path.with_suffix(".json.partial")
        partial.write_text(json.dumps(state, indent=2))
        os.replace(partial, path)

    @property
    def gateway_url(self) -> str:
        return f"http://{self.settings.host}:{self.settings.port}"

    @property
    def flower_url(self) -> str:
        return f"http://{FLOWER_HOST}:{self.settings.flower_port}"

    @property
    def metrics_urls(self) -> dict[str, str]:
        """Where Prometheus scrapes each worker of the stack."""
        host = self.settings.worker_metrics_host
        return {name: f"http://{host}:{port}/metrics" for name, port in self.metrics_ports.items()}

    def gateway_answers(self) -> bool:
        try:
            return httpx.get(f"{self.gateway_url}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self, hurry: Callable[[], bool] = lambda: False) -> None:
        """Stop the processes (the gateway first; the worker gets time to finish its tasks), then the embedded
        servers they use: each its stop signal, a bounded wait (none for the processes once `hurry()` is true;
        the servers' clean shutdowns are quick and spare a crash recovery), then SIGKILL to its process group."""
        processes = [self.children[n] for n in ("gateway", "flower", "beat", "worker", "sweeper") if n in self.children]
        stuck = stop_all(processes, self.say, hurry)
        servers = [self.children[n] for n in SERVERS if n in self.children]
        stuck += stop_all(servers, self.say)
        if stuck:
            listed = ", ".join(f"{c.name} (pid {c.pid})" for c in stuck)
            print(f"warning: still running after SIGKILL: {listed}; see {self.data_dir / STATE_FILE}", file=sys.stderr)
            return
        self.children.clear()
        with contextlib.suppress(FileNotFoundError):
            (self.data_dir / STATE_FILE).unlink()


def run_foreground(settings: Settings, *, with_flower: bool = True) -> int:
    """The `make run` experience: start all, restart what crashes, stop everything on Ctrl-C or a crash loop."""
    # Whatever the stack and its processes write (state, schedules, metrics files, logs) is their user's only.
    os.umask(0o077)
    stack = Stack(settings, with_flower=with_flower)
    signals_seen = 0

    def _count(signum: int, _frame: object) -> None:
        nonlocal signals_seen
        signals_seen += 1

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _count)
    for port, host, what in (
        (settings.port, settings.host, "gateway (PORT)"),
        (settings.flower_port, FLOWER_HOST, "Flower (FLOWER_PORT)"),
    ):
        if (what.startswith("gateway") or with_flower) and not port_is_free(port, host):
            print(
                f"error: port {port} for the {what} is already in use; set another or run `mnemoflow down`",
                file=sys.stderr,
            )
            return 2
    signals_at_stop = 0
    try:
        stack.start_servers()
        stack.migrate()
        stack.check_embedding_model()
        stack.start_processes()
        verdict = supervise(stack, lambda: signals_seen > 0)
        signals_at_stop = signals_seen
        if verdict is not None:
            print(f"error: {verdict}", file=sys.stderr, flush=True)
            return 1
        print("\nstopping…", flush=True)
        return 0
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        signals_at_stop = signals_at_stop or signals_seen
        stack.stop(hurry=lambda: signals_seen > signals_at_stop)  # a second Ctrl-C kills at once
        print("stopped.", flush=True)


def supervise(stack: Stack, stop_requested: Callable[[], bool], poll_interval: float = 0.25) -> str | None:
    """Restart what crashes until asked to stop; returns why it gave up, if a child crash-loops."""
    supervisor = Supervisor(stack.children, stack.settings.restarts, stack.say, changed=stack.write_state)
    ready = False
    while not stop_requested():
        verdict = supervisor.check()
        if verdict is not None:
            return verdict
        if not ready and "gateway" not in supervisor.restarting and stack.gateway_answers():
            ready = True
            stack.say(
                "\nMnemoflow is running.\n"
                f"  gateway   {stack.gateway_url}   (OpenAPI docs: {stack.gateway_url}/docs)\n"
                + (f"  flower    {stack.flower_url}\n" if stack.with_flower else "")
                + "".join(f"  metrics   {url}   ({name})\n" for name, url in stack.metrics_urls.items())
                + f"  data      {stack.data_dir}\n"
                f"  logs      {stack.data_dir / 'logs'}\n"
                "A process that crashes is started again. Press Ctrl-C to stop (or run `make down` from another shell)."
            )
        time.sleep(poll_interval)
    return None


def stop_background(settings: Settings) -> str:
    """`mnemoflow down`: ask a running stack's supervisor to stop it; if the supervisor is gone (or does not stop in
    time), stop what its state file lists, Flower and the embedded servers included."""
    path = settings.data_dir.resolve() / STATE_FILE
    if not path.exists():
        return f"no running stack found ({path} does not exist)"
    state = json.loads(path.read_text())
    supervisor = RecordedChild(
        "the supervisor",
        {"pid": state["supervisor_pid"], "started": state.get("supervisor_started"), "grace": SUPERVISOR_GRACE},
        group=False,  # under `make run` it shares make's process group
    )
    children = [RecordedChild(name, record) for name, record in state.get("children", {}).items()]
    was_running = supervisor.poll() is None
    if was_running:
        stop_all([supervisor], say=print)
    left = [child for child in children if child.poll() is None]
    stop_all([c for c in left if c.name not in SERVERS], say=print)
    stop_all([c for c in left if c.name in SERVERS], say=print)
    path.unlink(missing_ok=True)
    if not left:
        return "stopped"
    names = ", ".join(child.name for child in left)
    if was_running:
        return f"stopped; the supervisor left {names} running, stopped as well"
    return f"the supervisor was gone; stopped what it left running: {names}"
