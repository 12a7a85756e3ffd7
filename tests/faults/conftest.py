"""`mnemoflow up` for real, in a subprocess with its own data dir and free ports, so tests can hurt its children."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from infra.embedded import free_port

ROOT = Path(__file__).resolve().parents[2]
# Servers given by URL would not be the stack's own: these tests need the embedded ones, which they kill.
NOT_INHERITED = ("DATABASE_URL", "MNEMOFLOW_DATABASE_URL", "REDIS_URL", "MNEMOFLOW_REDIS_URL", "OM_PORT")


def wait_until(condition: Callable[[], Any], what: str, stack: RunningStack | None = None, timeout: float = 90) -> Any:
    """Poll `condition` until it returns something true; fail with `what` (and the stack's output) at `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := condition():
            return result
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout:.0f} s\n{stack.output() if stack else ''}")


def gone(pid: int) -> bool:
    """Whether process `pid` has ended (a zombie waiting for its parent to reap it has)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@dataclass
class RunningStack:
    """A `python -m services.cli.main up` process and where to look at it."""

    process: subprocess.Popen[bytes]
    data_dir: Path
    port: int
    flower_port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return "".join(
            f"--- {name} ---\n{(self.data_dir / name).read_text(errors='replace')}\n"
            for name in ("stdout.txt", "stderr.txt")
            if (self.data_dir / name).exists()
        )

    def read_state(self) -> dict[str, Any] | None:
        """The supervisor's state file, if there is one (it is replaced whole, never half-written)."""
        with contextlib.suppress(FileNotFoundError):
            return dict(json.loads((self.data_dir / "stack.json").read_text()))
        return None

    def state(self) -> dict[str, Any]:
        return wait_until(self.read_state, "the state file", self)

    def pids(self) -> dict[str, int]:
        return {name: child["pid"] for name, child in self.state()["children"].items()}

    def every_pid(self) -> set[int]:
        """The supervisor, its children and theirs (the worker's pool), as they are now."""
        state = self.read_state() or {"children": {}}
        pids = {self.process.pid, *(child["pid"] for child in state["children"].values())}
        for pid in list(pids):
            with contextlib.suppress(psutil.Error):
                pids |= {p.pid for p in psutil.Process(pid).children(recursive=True)}
        return pids

    def healthy(self) -> bool:
        """/health answers and says ok: database, broker and workers."""
        try:
            response = httpx.get(f"{self.url}/health", timeout=5)
        except httpx.HTTPError:
            return False
        return response.status_code == 200 and response.json()["ok"] is True

    def wait_ready(self) -> None:
        wait_until(lambda: self.process.poll() is not None or self.healthy(), "the stack answering /health", self)
        assert self.process.poll() is None, self.output()
        wait_until(
            lambda: {"worker", "sweeper", "beat", "gateway", "flower"} <= set(self.pids()), "every child started", self
        )


@pytest.fixture(scope="module")
def launch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., RunningStack]]:
    """Start `mnemoflow up` with extra environment; whatever a test leaves running is stopped afterwards."""
    launched: list[RunningStack] = []

    def start(name: str = "stack", **env: str) -> RunningStack:
        data_dir = tmp_path_factory.mktemp(name)
        port, flower_port = free_port(), free_port()
        environment = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
        environment |= {
            "MNEMOFLOW_ENVIRONMENT": "development",  # keyless, on loopback
            "MNEMOFLOW_EMBEDDING_PROVIDER": "synthetic",
            "HOST": "127.0.0.1",
            "PORT": str(port),
            "FLOWER_PORT": str(flower_port),
            "MNEMOFLOW_WORKER_CONCURRENCY": "1",
            # the worker's metrics on a free port (the sweeper's on the next), not 9540 shared with other stacks
            "MNEMOFLOW_WORKER_METRICS_PORT": str(free_port()),
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        with open(data_dir / "stdout.txt", "wb") as out, open(data_dir / "stderr.txt", "wb") as err:
            process = subprocess.Popen(
                [sys.executable, "-m", "services.cli.main", "up", "--data-dir", str(data_dir)],
                cwd=ROOT,
                env=environment,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group, as a terminal's foreground job would be
            )
        stack = RunningStack(process, data_dir, port, flower_port)
        launched.append(stack)
        return stack

    yield start
    for stack in launched:
        _stop_leftovers(stack)


def _stop_leftovers(stack: RunningStack) -> None:
    from services.cli.stack import stop_background
    from shared.config import Settings

    if stack.process.poll() is None:
        stack.process.send_signal(signal.SIGTERM)
        try:
            stack.process.wait(timeout=90)
        except subprocess.TimeoutExpired:
            stack.process.kill()
            stack.process.wait()
    if (stack.data_dir / "stack.json").exists():
        stop_background(Settings(data_dir=stack.data_dir))
