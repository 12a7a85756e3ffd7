"""`mnemoflow up`: start the embedded servers (unless URLs are given), migrate, run every process, stop cleanly."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from infra.embedded import EmbeddedPostgres, EmbeddedRedis, port_is_free
from infra.migrate import upgrade
from infra.processes import gateway_command, wait_healthy, worker_command
from shared.config import Settings
from shared.db import Database, create_db_engine
from shared.embedding.factory import create_embedder, create_sector_embedders
from shared.errors import MnemoflowError
from shared.storage.sector_models import ensure_store_model_for

STATE_FILE = "stack.json"
DEFAULT_EMBEDDED_REDIS_PORT = 6390


@dataclass
class Stack:
    settings: Settings
    with_flower: bool = True
    with_beat: bool = True
    echo: bool = True
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
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
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.settings.database_url:
            self.database_url = self.settings.database_url
            self.say("PostgreSQL: using DATABASE_URL (nothing embedded started)")
        else:
            self.postgres = EmbeddedPostgres(self.data_dir / "pgdata")
            self.database_url = self.postgres.start()
            self.say(f"PostgreSQL 18 + pgvector (embedded): {self.data_dir / 'pgdata'}")
        if self.settings.redis_url:
            self.redis_url = self.settings.redis_url
            self.say("Redis: using REDIS_URL (nothing embedded started)")
        else:
            port = DEFAULT_EMBEDDED_REDIS_PORT if port_is_free(DEFAULT_EMBEDDED_REDIS_PORT) else 0
            self.redis = EmbeddedRedis(self.data_dir / "valkey", port=port)
            self.redis_url = self.redis.start()
            self.say(f"Valkey (embedded): {self.redis_url}")

    def migrate(self) -> None:
        upgrade(self.database_url)
        self.say("schema: migrations applied")

    def check_embedding_model(self) -> None:
        """Load the configured model once and refuse a store whose vectors came from another one."""
        settings = self.settings.model_copy(update={"database_url": self.database_url})
        embedder = create_embedder(settings)
        db = Database(create_db_engine(settings, "mnemoflow.launcher", pool_size=1))
        try:
            with db.session() as session:
                ensure_store_model_for(session, create_sector_embedders(settings, embedder), settings)
        except MnemoflowError as exc:
            raise RuntimeError(exc.message) from exc
        finally:
            db.dispose()
        self.say(f"embeddings: {embedder.name} ({embedder.model}, {embedder.dim} dimensions)")

    def child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["DATABASE_URL"] = self.database_url
        env["REDIS_URL"] = self.redis_url
        env["MNEMOFLOW_DATA_DIR"] = str(self.data_dir)
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def spawn(self, name: str, args: list[str]) -> None:
        log_path = self.data_dir / "logs" / f"{name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_file = open(log_path, "ab")  # noqa: SIM115 - owned by the child for its lifetime
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", *args],
            env=self.child_env(),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches us, and we stop the children in order
        )

    def start_processes(self) -> None:
        s = self.settings
        self.spawn(
            "worker", worker_command(concurrency=s.worker_concurrency, name="mnemoflow-all", log_level=s.log_level)
        )
        if self.with_beat:
            self.spawn(
                "beat",
                [
                    "celery",
                    "-A",
                    "workers.app",
                    "beat",
                    "--loglevel",
                    s.log_level,
                    "-s",
                    str(self.data_dir / "celerybeat-schedule"),
                ],
            )
        self.spawn("gateway", gateway_command(host=s.host, port=s.port, log_level=s.log_level))
        if self.with_flower:
            self.spawn(
                "flower",
                ["celery", "-A", "workers.app", "flower", f"--port={s.flower_port}", f"--address={s.host}"],
            )
        self.write_state()

    def write_state(self) -> None:
        state = {
            "supervisor_pid": os.getpid(),
            "pids": {name: p.pid for name, p in self.processes.items()},
            "gateway": self.gateway_url,
            "flower": self.flower_url if self.with_flower else None,
            "redis_url": self.redis_url,
            "pgdata": str(self.data_dir / "pgdata") if self.postgres else None,
        }
        (self.data_dir / STATE_FILE).write_text(json.dumps(state, indent=2))

    @property
    def gateway_url(self) -> str:
        return f"http://{self.settings.host}:{self.settings.port}"

    @property
    def flower_url(self) -> str:
        return f"http://{self.settings.host}:{self.settings.flower_port}"

    def wait_ready(self, timeout: float = 60.0) -> None:
        try:
            wait_healthy(
                self.gateway_url,
                self.processes["gateway"],
                timeout=timeout,
                log_path=self.data_dir / "logs" / "gateway.log",
            )
        finally:
            self.check_children()

    def check_children(self) -> None:
        for name, proc in self.processes.items():
            code = proc.poll()
            if code is not None:
                raise RuntimeError(
                    f"{name} exited with code {code}; its log: {self.data_dir / 'logs' / (name + '.log')}"
                )

    def stop(self) -> None:
        """Stop the children (gateway first, workers get time to finish), then the embedded servers."""
        for name in ("gateway", "flower", "beat", "worker"):
            proc = self.processes.get(name)
            if proc and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for _name, proc in self.processes.items():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        self.processes.clear()
        if self.redis:
            self.redis.stop()
        if self.postgres:
            self.postgres.stop()
        with contextlib.suppress(FileNotFoundError):
            (self.data_dir / STATE_FILE).unlink()


def run_foreground(settings: Settings, *, with_flower: bool = True) -> int:
    """The `make run` experience: start all, print where things are, stop everything on Ctrl-C."""
    stack = Stack(settings, with_flower=with_flower)
    stopping = False

    def _stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    for port, what in ((settings.port, "gateway (PORT)"), (settings.flower_port, "Flower (FLOWER_PORT)")):
        if (what.startswith("gateway") or with_flower) and not port_is_free(port, settings.host):
            print(
                f"error: port {port} for the {what} is already in use; set another or run `mnemoflow down`",
                file=sys.stderr,
            )
            return 2
    try:
        stack.start_servers()
        stack.migrate()
        stack.check_embedding_model()
        stack.start_processes()
        stack.wait_ready()
        print(
            "\nMnemoflow is running.\n"
            f"  gateway   {stack.gateway_url}   (OpenAPI docs: {stack.gateway_url}/docs)\n"
            + (f"  flower    {stack.flower_url}\n" if with_flower else "")
            + f"  data      {stack.data_dir}\n"
            f"  logs      {stack.data_dir / 'logs'}\n"
            "Press Ctrl-C to stop (or run `make down` from another shell).",
            flush=True,
        )
        while not stopping:
            stack.check_children()
            time.sleep(0.5)
        print("\nstopping…", flush=True)
        return 0
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        stack.stop()
        print("stopped.", flush=True)


def stop_background(settings: Settings) -> str:
    """`mnemoflow down`: ask a running stack to stop (its supervisor stops the rest)."""
    path = settings.data_dir.resolve() / STATE_FILE
    if not path.exists():
        return f"no running stack found ({path} does not exist)"
    state = json.loads(path.read_text())
    pid = int(state["supervisor_pid"])
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        for child in state.get("pids", {}).values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(child), signal.SIGTERM)
        if state.get("pgdata"):
            leftover = EmbeddedPostgres(Path(state["pgdata"]))
            leftover.start()  # attaches to the running server
            leftover.stop()
        path.unlink(missing_ok=True)
        return "the supervisor was gone; stopped what it had left behind"
    for _ in range(120):
        if not path.exists():
            return "stopped"
        time.sleep(0.5)
    return "asked the stack to stop; it is still shutting down"
