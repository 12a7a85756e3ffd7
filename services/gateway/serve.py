"""The gateway's launcher: `python -m services.gateway.serve` runs the app under uvicorn as
MNEMOFLOW_GATEWAY_WORKERS processes (docs/scaling.md#many-clients).

Before any process starts, the launcher refuses what would fail in all of them (no keys outside development, more
connections than PostgreSQL allows) and makes the Prometheus directory every process writes its metrics into, so
that /metrics sums them all whichever process answers it. uvicorn's supervisor starts the processes again when one
dies; this one also marks a dead process's metrics dead (its counters stay in the sums). Other options are
uvicorn's own (--host, --port, --log-level, UVICORN_* variables).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

import psycopg
from prometheus_client import multiprocess
from uvicorn.config import STARTUP_FAILURE, Config, create_ssl_context
from uvicorn.supervisors import Multiprocess
from uvicorn.supervisors.multiprocess import Process

from shared.backpressure import ConnectionBudget
from shared.config import OpenAccessRefused, Settings, get_settings
from shared.monitoring import metrics as shared_metrics

log = logging.getLogger("mnemoflow.gateway")

APP = "services.gateway.app:create_app"
# uvicorn kills a process that does not answer its supervisor's ping within this many seconds; its 5 s default
# killed processes that were only starved of the CPU on a loaded machine (start-up loads the model).
HEALTHCHECK_SECONDS = 30


class Supervisor(Multiprocess):
    """uvicorn's supervisor, marking each process that ended dead in the metrics directory, and ending with
    uvicorn's start-up failure code when a process failed to start (one process's uvicorn does the same)."""

    def __init__(self, config: Config, sockets: list[socket.socket]) -> None:
        if config.is_ssl and config.ssl_certfile:  # unreadable TLS files: fail here once, not in every process
            create_ssl_context(
                config.ssl_certfile,
                config.ssl_keyfile,
                config.ssl_keyfile_password,
                config.ssl_version,
                config.ssl_cert_reqs,
                config.ssl_ca_certs,
                config.ssl_ciphers,
            )
        super().__init__(config, sockets)
        self.startup_failed = False

    def keep_subprocess_alive(self) -> None:
        before = list(self.processes)
        super().keep_subprocess_alive()  # a dead process replaced, or the start-up failure that stops everything
        self._mark_gone(before)

    def restart_all(self) -> None:  # SIGHUP
        before = list(self.processes)
        super().restart_all()
        self._mark_gone(before)

    def handle_ttou(self) -> None:  # one process fewer
        before = list(self.processes)
        super().handle_ttou()
        self._mark_gone(before)

    def _mark_gone(self, before: list[Process]) -> None:
        for process in before:
            if process not in self.processes and process.pid is not None:
                multiprocess.mark_process_dead(process.pid)
                self.startup_failed = self.startup_failed or process.exitcode == STARTUP_FAILURE

    def join_all(self) -> None:
        super().join_all()
        for process in self.processes:
            if process.pid is not None:
                multiprocess.mark_process_dead(process.pid)

    def run(self) -> None:
        super().run()
        if self.startup_failed:
            sys.exit(STARTUP_FAILURE)


def connection_refusal(settings: Settings, worker_processes: int = 0) -> str | None:
    """Why the gateway's processes (and `worker_processes` worker processes beside them) would not fit in the
    database's connections, or None (also when the database cannot be asked now: the processes then say so)."""
    limits = settings.database_limits
    budget = ConnectionBudget(
        gateway_processes=settings.gateway_processes,
        gateway_pool=limits.gateway_pool_size,
        fulltext_threads=settings.retrieval.parallel_threads,
        worker_processes=worker_processes,
    )
    dsn = (settings.database_url or "").replace("postgresql+psycopg://", "postgresql://")
    try:
        with psycopg.connect(
            dsn, autocommit=True, connect_timeout=5, application_name="mnemoflow.gateway.launcher"
        ) as conn:
            max_connections = int(_show(conn, "max_connections"))
            reserved = int(_show(conn, "superuser_reserved_connections"))
            with contextlib.suppress(psycopg.Error):  # PostgreSQL 16+: reserved for roles granted it
                reserved += int(_show(conn, "reserved_connections"))
    except (psycopg.Error, ValueError) as exc:
        log.warning("could not read the database's max_connections (%s); not checking the pools against it", exc)
        return None
    return budget.refusal(max_connections, reserved)


def _show(conn: psycopg.Connection, name: str) -> str:
    row = conn.execute(f"SHOW {name}").fetchone()
    return str(row[0]) if row else ""


def metrics_directory(settings: Settings) -> tuple[Path, bool]:
    """The directory the processes keep their metrics in (emptied) and whether it is a temporary one."""
    if settings.gateway_metrics_dir is not None:
        return shared_metrics.use_directory(settings.gateway_metrics_dir), False
    return shared_metrics.use_directory(Path(tempfile.mkdtemp(prefix="mnemoflow-gateway-metrics-"))), True


def listening_address(uvicorn_args: list[str]) -> str:
    """Where uvicorn will listen, from its options (as it reads them: the option, UVICORN_HOST, 127.0.0.1)."""
    parser = argparse.ArgumentParser(add_help=False)
    for option in ("--host", "--uds", "--fd"):
        parser.add_argument(option)
    given, _ = parser.parse_known_args(uvicorn_args)
    if given.uds:
        return str(given.uds)  # a socket file: this machine only
    if given.fd is not None:
        return f"file descriptor {given.fd}"  # a socket handed over: where it listens is unknown here
    return given.host or os.environ.get("UVICORN_HOST") or "127.0.0.1"


def serve(uvicorn_args: list[str], workers: int | None, worker_processes: int = 0) -> int:
    """Run the gateway under uvicorn's command line (`uvicorn_args`: its options, UVICORN_* variables read too)
    until it is stopped; the exit code. `worker_processes`: the Celery processes beside it on the same database,
    counted with its own connections."""
    settings = get_settings()
    if workers is not None:
        settings = settings.model_copy(update={"gateway_workers": workers})
    logging.basicConfig(level=settings.log_level.upper(), format="%(levelname)s:     %(message)s")
    try:
        settings.require_keys("the gateway", listens_on=listening_address(uvicorn_args))
    except OpenAccessRefused as exc:
        log.error("%s", exc)
        return STARTUP_FAILURE
    refusal = connection_refusal(settings, worker_processes)
    if refusal:
        log.error("refusing to start the gateway: %s", refusal)
        return STARTUP_FAILURE
    processes = settings.gateway_processes
    # The processes read their settings at start-up: what they inherit from here. The local model keeps its one
    # onnxruntime thread per process (MNEMOFLOW_LOCAL_THREADS, 1): with one process per core the cores are used,
    # and a second thread made a query's embedding slower on cores shared with PostgreSQL and the workers.
    os.environ["MNEMOFLOW_GATEWAY_WORKERS"] = str(processes)
    directory, temporary = metrics_directory(settings)
    log.info("gateway: %d process(es), metrics in %s", processes, directory)
    uvicorn_main = importlib.import_module("uvicorn.main")  # the module: the package's `main` is its command
    setattr(uvicorn_main, "Multiprocess", Supervisor)  # noqa: B010  # what uvicorn runs for --workers above 1
    args = [APP, "--factory", *uvicorn_args, "--workers", str(processes)]
    args += ["--timeout-worker-healthcheck", str(HEALTHCHECK_SECONDS)]
    try:
        uvicorn_main.main.main(args=args, prog_name="uvicorn", standalone_mode=False)
        return 0
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 1
    except KeyboardInterrupt:
        return 0
    finally:
        if temporary:
            shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Run the Mnemoflow gateway; other options are uvicorn's (e.g. --host, --port, --log-level)."
    )
    parser.add_argument("--workers", type=int, default=None, help="processes [MNEMOFLOW_GATEWAY_WORKERS]")
    parser.add_argument(
        "--beside-worker-processes",
        type=int,
        default=0,
        help="Celery processes on the same database, counted with the gateway's connections [0]",
    )
    args, uvicorn_args = parser.parse_known_args(argv)
    sys.exit(serve(uvicorn_args, args.workers, args.beside_worker_processes))


if __name__ == "__main__":
    main()
