"""What `mnemoflow up` supervises: its processes (each in a session of its own), the embedded servers it started,
and, for `mnemoflow down`, the processes a state file lists; how each is seen to end and how all are stopped."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psutil

from infra.embedded import EmbeddedPostgres, EmbeddedRedis
from shared.config.secrets import private_dir, private_file

KILL_WAIT = 5.0  # seconds a SIGKILLed process group gets to disappear before we say so


def describe_exit(returncode: int | None) -> str:
    """How a process ended, for a person: "exited with code 1", "was killed by SIGKILL"."""
    if returncode is None:
        return "stopped running"
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


def process_started(pid: int) -> float | None:
    """When process `pid` started (its identity beside the pid, which the system reuses); None if it is gone."""
    try:
        process = psutil.Process(pid)
        return None if process.status() == psutil.STATUS_ZOMBIE else float(process.create_time())
    except psutil.Error:
        return None


def kill_group(pgid: int) -> None:
    """SIGKILL every process of group `pgid`."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class Child(ABC):
    """One supervised thing: started, watched (`poll`), stopped with `stop_signal`, then SIGKILL after `grace`."""

    name: str
    log_path: Path
    stop_signal: signal.Signals = signal.SIGTERM
    grace: float = 10.0
    started_at: float = 0.0  # time.monotonic() of the last start
    leads_group: bool = True  # its pid is its process group's id

    @abstractmethod
    def start(self) -> None: ...

    @property
    @abstractmethod
    def pid(self) -> int | None: ...

    @abstractmethod
    def poll(self) -> str | None:
        """None while it runs; once it has ended, how (and what was left of its process group is killed)."""

    def send(self, sig: signal.Signals) -> None:
        """Send `sig` to the child's main process (the Celery worker's pool finishes its tasks on SIGTERM)."""
        if self.pid is not None and self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL its whole process group (the pid is still ours: it runs, or is a zombie not yet reaped)."""
        if self.pid is None or self.poll() is not None:
            return
        if self.leads_group:
            kill_group(self.pid)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def record(self) -> dict[str, Any]:
        """What `mnemoflow down` needs to stop it when the supervisor is gone."""
        pid = self.pid
        return {
            "pid": pid,
            "started": process_started(pid) if pid else None,
            "stop_signal": self.stop_signal.name,
            "grace": self.grace,
            "log": str(self.log_path),
        }


class ProcessChild(Child):
    """`python -m <args>` in a session of its own, its output appended to `log_path`."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_path: Path, grace: float = 10.0):
        self.name, self.args, self.env, self.log_path, self.grace = name, args, env, log_path, grace
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        private_dir(self.log_path.parent)
        # Logs may quote what a tenant sent: its user's only, like the data dir.
        with os.fdopen(private_file(self.log_path), "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", *self.args],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C reaches the supervisor only; it stops the children in order
            )
        self.started_at = time.monotonic()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def poll(self) -> str | None:
        process = self.process
        if process is None:
            return "was never started"
        if process.returncode is None:
            # Look without reaping: while the leader is a zombie its pid (= its group's id) cannot be reused, so
            # what is left of its group (a killed worker's pool processes) can be killed safely first.
            try:
                running = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
            except ChildProcessError:  # reaped already
                running = process.poll() is None
            if running:
                return None
            kill_group(process.pid)
            process.wait()
        return describe_exit(process.returncode)


class ValkeyChild(ProcessChild):
    """The embedded Valkey, restarted on the same port and data directory so the children's REDIS_URL stays valid."""

    def __init__(self, server: EmbeddedRedis):
        super().__init__("valkey", [], {}, server.log_path, grace=10.0)
        self.server = server
        self.process = server.process
        self.started_at = time.monotonic()

    def start(self) -> None:
        self.server.stop()  # reaps what is left of a dead one
        port = self.server.port
        self.server.start()
        self.process = self.server.process
        self.started_at = time.monotonic()
        if self.server.port != port:
            raise RuntimeError(f"Valkey came back on port {self.server.port}, not {port}")


class PostgresChild(Child):
    """The embedded PostgreSQL, restarted on the same data directory and socket (the same DATABASE_URL).

    Its postmaster is not our child (pg_ctl starts it in a session of its own); SIGINT is its fast shutdown."""

    stop_signal = signal.SIGINT

    def __init__(self, server: EmbeddedPostgres, grace: float = 30.0):
        self.name, self.server, self.grace = "postgres", server, grace
        self.log_path = server.pgdata / "log"
        self.started_at = time.monotonic()
        self._last_pid = server.pid

    def start(self) -> None:
        self.server.start()
        self._last_pid = self.server.pid
        self.started_at = time.monotonic()

    @property
    def pid(self) -> int | None:
        return self._last_pid

    def poll(self) -> str | None:
        if self.server.alive():
            return None
        # Backends outlive a killed postmaster for a moment and keep its shared memory: a new one would not start.
        # While they live, the system does not reuse the pid (their group's id); if it was reused, they are gone.
        if self._last_pid is not None and process_started(self._last_pid) is None:
            kill_group(self._last_pid)
        return describe_exit(None)


class RecordedChild(Child):
    """A process a state file lists, stopped by `mnemoflow down` when the supervisor that started it is gone."""

    def __init__(self, name: str, record: dict[str, Any], *, group: bool = True):
        self.name, self.log_path, self.leads_group = name, Path(record.get("log") or ""), group
        self._pid: int | None = record.get("pid")
        self._started: float | None = record.get("started")
        self.stop_signal = signal.Signals[record.get("stop_signal", "SIGTERM")]
        self.grace = float(record.get("grace", 10.0))

    def start(self) -> None:
        raise NotImplementedError("a recorded process is only stopped")

    @property
    def pid(self) -> int | None:
        return self._pid

    def poll(self) -> str | None:
        pid, started = self._pid, self._started
        if pid is None:
            return describe_exit(None)
        now = process_started(pid)
        # the same pid with another start time is someone else's process now (no start time: an older state file)
        if now is not None and (started is None or abs(now - started) < 1.0):
            return None
        if self.leads_group and now is None:
            kill_group(pid)  # what is left of its group (a worker's helpers): no live process has that id now
        return describe_exit(None)


def stop_all(
    children: Iterable[Child], say: Callable[[str], None], hurry: Callable[[], bool] = lambda: False
) -> list[Child]:
    """Send each running child its stop signal, wait up to its grace (not at all once `hurry()` is true), then
    SIGKILL its process group; returns those still running a few seconds after that (none, normally)."""
    waiting: dict[Child, float] = {}
    for child in children:
        if child.poll() is None:
            child.send(child.stop_signal)
            waiting[child] = time.monotonic() + child.grace
    killed: dict[Child, float] = {}
    stuck: list[Child] = []
    while waiting or killed:
        now = time.monotonic()
        for child, deadline in list(waiting.items()):
            if child.poll() is not None:
                del waiting[child]
            elif hurry() or now >= deadline:
                why = "asked twice" if now < deadline else f"not stopped after {child.grace:g} s"
                say(f"{child.name} (pid {child.pid}): {why}, killing it")
                child.kill()
                del waiting[child]
                killed[child] = now + KILL_WAIT
        for child, deadline in list(killed.items()):
            if child.poll() is not None or now >= deadline:
                del killed[child]
                stuck += [child] if child.poll() is None else []
        time.sleep(0.05)
    return stuck
