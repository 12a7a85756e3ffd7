"""The restart loop's decisions and what it says, on stand-in children (the real processes: tests/faults)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from services.cli.children import Child, describe_exit
from services.cli.supervisor import Supervisor
from shared.restarts import RestartPolicy


class StandIn(Child):
    """A child whose end is scripted: each `poll` pops the next outcome (None: still running)."""

    def __init__(self, name: str, outcomes: list[str | None], fail_start: bool = False):
        self.name, self.log_path, self.outcomes, self.fail_start = name, Path(f"/logs/{name}.log"), outcomes, fail_start
        self.starts = 0
        self.started_at = time.monotonic()

    def start(self) -> None:
        self.starts += 1
        if self.fail_start:
            raise RuntimeError("port 6390 is taken\nmore detail")

    @property
    def pid(self) -> int | None:
        return 100 + self.starts

    def poll(self) -> str | None:
        return self.outcomes.pop(0) if self.outcomes else None


def _supervisor(*children: Child, crashes: int = 3) -> tuple[Supervisor, list[str], list[int]]:
    said: list[str] = []
    changes: list[int] = []
    policy = RestartPolicy(first_delay=0.0, crash_loop_crashes=crashes, crash_loop_window=3600)
    supervisor = Supervisor({c.name: c for c in children}, policy, said.append, changed=lambda: changes.append(1))
    return supervisor, said, changes


def test_a_crashed_child_is_restarted_and_the_others_are_left_alone():
    worker, gateway = StandIn("worker", ["was killed by SIGKILL"]), StandIn("gateway", [])
    supervisor, said, changes = _supervisor(worker, gateway)
    assert supervisor.check() is None
    assert supervisor.restarting == ["worker"]
    assert said == [
        "restart: worker was killed by SIGKILL (pid 100, up 0 s); starting it again in 0 s (attempt 1). "
        "Its log: /logs/worker.log"
    ]
    assert supervisor.check() is None
    assert (worker.starts, gateway.starts, supervisor.restarting, changes) == (1, 0, [], [1])


def test_a_crash_loop_gives_up_with_a_plain_reason():
    gateway = StandIn("gateway", ["exited with code 1"] * 3)  # checks: crash, restart, crash, restart, crash
    supervisor, said, _ = _supervisor(gateway, crashes=3)
    verdicts = [supervisor.check() for _ in range(5)]
    assert verdicts[:4] == [None] * 4 and len(said) == 2
    assert verdicts[4] == (
        "gateway exited with code 1 (pid 102); that is 3 crashes within 3600 s: a crash loop, so Mnemoflow "
        "stops. Its log: /logs/gateway.log"
    )


def test_a_child_that_cannot_be_started_again_counts_as_a_crash():
    valkey = StandIn("valkey", ["was killed by SIGKILL"], fail_start=True)
    supervisor, _, changes = _supervisor(valkey, crashes=2)
    assert supervisor.check() is None
    verdict = supervisor.check()
    assert verdict is not None and verdict.startswith(
        "valkey could not start again (RuntimeError: port 6390 is taken) (pid 101); that is 2 crashes"
    )
    assert changes == []


def test_exits_are_described_by_code_or_signal():
    assert describe_exit(1) == "exited with code 1"
    assert describe_exit(0) == "exited with code 0"
    assert describe_exit(-signal.SIGKILL) == "was killed by SIGKILL"
    assert describe_exit(-signal.SIGSEGV) == "was killed by SIGSEGV"
    assert describe_exit(None) == "stopped running"
