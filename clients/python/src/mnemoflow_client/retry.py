"""When a call is tried again and after how long: exponential backoff, the server's `Retry-After` first.

A small loop of our own rather than tenacity, so the client installs with httpx and pydantic only; the rules are
few and live here, pure, where the tests read them.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

# 429: the tenant's quota; 503: the database, the broker or the provider cannot serve now. The gateway answers both
# before it writes anything (or after rolling back), with Retry-After: the same request may pass later.
RETRY_STATUSES = frozenset({429, 503})


@dataclass(frozen=True)
class RetryPolicy:
    """How many times, and how long apart, a call is tried again.

    A 429 or 503 answer is retried for every call (the gateway did nothing), after its `Retry-After` when it has
    one; a connection that could not be made (nothing was sent) likewise. A call that may have reached the gateway
    (the connection broke or timed out mid-way) is retried only when sending it twice does no harm: reads, and
    writes that are idempotent (an add of the same content is the same memory, a batch carries an idempotency key).
    """

    retries: int = 3
    """Attempts after the first (0: never retry)."""
    backoff: float = 0.5
    """Seconds before the first retry without Retry-After; doubled for each further one."""
    max_backoff: float = 8.0
    """The most a computed backoff waits."""
    max_retry_after: float = 60.0
    """A Retry-After longer than this is not waited for: the error is raised with its `retry_after`."""
    jitter: bool = True
    """Spread computed backoffs over [delay/2, delay], so many clients do not retry in step."""
    on_retry: Callable[[int, float, str], None] | None = field(default=None, compare=False)
    """Called before each wait with (retry number from 1, seconds, why), to log or count retries."""

    def delay(self, retry: int, retry_after: float | None = None) -> float | None:
        """Seconds to wait before retry number `retry` (from 1), or None when no retry is left or the server asks
        for a longer wait than `max_retry_after`."""
        if retry > self.retries:
            return None
        if retry_after is not None:
            return retry_after if retry_after <= self.max_retry_after else None
        computed = min(self.max_backoff, self.backoff * 2 ** (retry - 1))
        return computed * (0.5 + random.random() / 2) if self.jitter else computed


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """`Retry-After` in seconds: a number of seconds, or an HTTP date (seconds from `now` until then, at least
    0); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def as_policy(retries: int | RetryPolicy | None) -> RetryPolicy:
    """A RetryPolicy from a client's `retries` argument: a count, a policy, or None (the defaults)."""
    if isinstance(retries, RetryPolicy):
        return retries
    return RetryPolicy() if retries is None else RetryPolicy(retries=retries)
