"""The commands that run Mnemoflow's processes, shared by the launcher, the tests and the benchmarks."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from shared.config import Settings
from shared.jobs import ALL_QUEUES, Queue


def worker_command(
    *,
    concurrency: int,
    name: str | None = None,
    queues: Sequence[str] = ALL_QUEUES,
    log_level: str = "INFO",
    quiet_startup: bool = False,
    pool: str | None = None,
) -> list[str]:
    """`python -m` arguments for a Celery worker on the given queues (all of them by default)."""
    args = [
        "celery",
        "-A",
        "workers.app",
        "worker",
        "-Q",
        ",".join(queues),
        "-c",
        str(concurrency),
        "--loglevel",
        log_level,
    ]
    if name:
        args += ["-n", f"{name}@%h"]
    if pool:
        args += ["--pool", pool]
    if quiet_startup:  # no cluster chatter: faster start for short-lived workers
        args += ["--without-mingle", "--without-gossip"]
    return args


def sweeper_command(*, name: str | None = None, log_level: str = "INFO", quiet_startup: bool = False) -> list[str]:
    """The sweeper's own worker: one process on the `sweep` queue only, so re-sending lost work never waits behind
    the long tasks (a transcription, a decay cycle) that keep every other worker process busy."""
    return worker_command(
        concurrency=1, name=name, queues=(Queue.SWEEP,), log_level=log_level, quiet_startup=quiet_startup, pool="solo"
    )


WORK_QUEUES: tuple[str, ...] = tuple(q for q in ALL_QUEUES if q != Queue.SWEEP)


def gateway_command(
    *, host: str, port: int, log_level: str = "info", workers: int | None = None, beside_worker_processes: int = 0
) -> list[str]:
    """`python -m` arguments for the gateway under uvicorn (services/gateway/serve.py), as `workers` processes
    (default: MNEMOFLOW_GATEWAY_WORKERS, or one per usable core up to 4). `beside_worker_processes`: the Celery
    processes on the same database, which the gateway counts with its own connections before it starts."""
    args = ["services.gateway.serve", "--host", host, "--port", str(port), "--log-level", log_level.lower()]
    if workers is not None:
        args += ["--workers", str(workers)]
    if beside_worker_processes:
        args += ["--beside-worker-processes", str(beside_worker_processes)]
    return args


def _log_tail(log_path: Path | None) -> str:
    """The end of a child's log, for an error saying why it did not start."""
    return log_path.read_text()[-3000:] if log_path and log_path.exists() else ""


def wait_healthy(
    url: str, proc: subprocess.Popen[bytes] | None = None, *, timeout: float = 60.0, log_path: Path | None = None
) -> None:
    """Block until the gateway at `url` serves: GET /health answers 200, or 503 for its workers alone (the database
    and the broker answer; no worker takes a queue yet); fail early, with the log's tail, if the process exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the gateway exited with code {proc.returncode}:\n{_log_tail(log_path)}")
        with contextlib.suppress(httpx.HTTPError, ValueError):
            response = httpx.get(f"{url}/health", timeout=2)
            if response.status_code == 200:
                return
            body = response.json() if response.status_code == 503 else {}
            if body.get("database", {}).get("ok") and body.get("broker", {}).get("ok"):
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not become healthy within {timeout:.0f}s\n{_log_tail(log_path)}")


def wait_for_worker(
    settings: Settings,
    name: str,
    proc: subprocess.Popen[bytes] | None = None,
    *,
    timeout: float = 60.0,
    log_path: Path | None = None,
) -> None:
    """Block until the worker named `name` answers a broadcast ping (its pool is forked and consuming); fail
    early, with the log's tail, if the process exits."""
    from shared.queueing import make_celery

    app = make_celery(settings, "mnemoflow.launcher")
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"the worker exited with code {proc.returncode}:\n{_log_tail(log_path)}")
            replies = app.control.ping(timeout=1.0) or []
            if any(name in next(iter(reply)) for reply in replies):
                return
        raise RuntimeError(f"the worker {name} did not answer within {timeout:.0f} s:\n{_log_tail(log_path)}")
    finally:
        app.close()
