"""When `mnemoflow up` restarts a crashed child, and when it gives up: exponential backoff and crash loops (pure)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RestartPolicy:
    """The supervisor's restart rules (`settings.restarts`)."""

    # The first restart waits this long; each further one twice as long, up to `max_delay`.
    first_delay: float = 1.0
    max_delay: float = 30.0
    # A child that stayed up this long crashed for a new reason: its next restart waits `first_delay` again.
    reset_after: float = 60.0
    # This many crashes of one child within `crash_loop_window` seconds is a crash loop: stop everything.
    crash_loop_crashes: int = 5
    crash_loop_window: float = 120.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait before restart number `attempt` (1, 2, …) of a run of quick crashes."""
        return min(self.max_delay, self.first_delay * 2 ** min(attempt - 1, 64))


@dataclass(frozen=True)
class Restart:
    """Start the child again after `delay` seconds; `attempt` counts the restarts since it last stayed up."""

    attempt: int
    delay: float


@dataclass(frozen=True)
class GiveUp:
    """The child is in a crash loop: `crashes` crashes within `window` seconds."""

    crashes: int
    window: float


@dataclass
class CrashHistory:
    """One child's recent crashes, deciding what each new one means."""

    policy: RestartPolicy
    attempt: int = 0
    _crash_times: deque[float] = field(default_factory=deque, repr=False)

    def crashed(self, at: float, uptime: float) -> Restart | GiveUp:
        """The child died at time `at` (seconds, monotonic) after running `uptime` seconds."""
        if uptime >= self.policy.reset_after:
            self.attempt = 0
        self._crash_times.append(at)
        while self._crash_times and self._crash_times[0] <= at - self.policy.crash_loop_window:
            self._crash_times.popleft()
        if len(self._crash_times) >= self.policy.crash_loop_crashes:
            return GiveUp(len(self._crash_times), self.policy.crash_loop_window)
        self.attempt += 1
        return Restart(self.attempt, self.policy.delay(self.attempt))
