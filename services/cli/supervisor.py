"""The restart loop of `mnemoflow up`: a crashed child is started again after its backoff, until a crash loop."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from services.cli.children import Child
from shared.restarts import CrashHistory, GiveUp, RestartPolicy


@dataclass
class Supervisor:
    """Watches `children` (by name); `changed` is called whenever one of them has a new pid."""

    children: dict[str, Child]
    policy: RestartPolicy
    say: Callable[[str], None]
    changed: Callable[[], None] = lambda: None
    histories: dict[str, CrashHistory] = field(default_factory=dict)
    restart_at: dict[str, float] = field(default_factory=dict)  # name → time.monotonic() of its next start

    def check(self) -> str | None:
        """Notice what ended and start what is due; returns why to give up when a child is in a crash loop."""
        for name, child in self.children.items():
            now = time.monotonic()
            if name in self.restart_at:
                if now >= self.restart_at[name]:
                    del self.restart_at[name]
                    reason = self._start(child)
                    if reason is not None:
                        return self._crashed(child, f"could not start again ({reason})", time.monotonic(), 0.0)
                continue
            how = child.poll()
            if how is not None:
                verdict = self._crashed(child, how, now, now - child.started_at)
                if verdict is not None:
                    return verdict
        return None

    def _start(self, child: Child) -> str | None:
        try:
            child.start()
        except Exception as exc:  # a server that cannot start is one more crash, not the supervisor's end
            return f"{type(exc).__name__}: {exc}".splitlines()[0]
        self.changed()
        return None

    def _crashed(self, child: Child, how: str, now: float, uptime: float) -> str | None:
        history = self.histories.setdefault(child.name, CrashHistory(self.policy))
        decision = history.crashed(now, uptime)
        if isinstance(decision, GiveUp):
            return (
                f"{child.name} {how} (pid {child.pid}); that is {decision.crashes} crashes within "
                f"{decision.window:g} s: a crash loop, so Mnemoflow stops. Its log: {child.log_path}"
            )
        self.restart_at[child.name] = now + decision.delay
        self.say(
            f"restart: {child.name} {how} (pid {child.pid}, up {uptime:.0f} s); starting it again in "
            f"{decision.delay:g} s (attempt {decision.attempt}). Its log: {child.log_path}"
        )
        return None

    @property
    def restarting(self) -> list[str]:
        """The children waiting for their restart."""
        return list(self.restart_at)
