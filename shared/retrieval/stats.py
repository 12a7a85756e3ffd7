"""Injection rate and retrieval blindness per tenant (Recall seed, "Threshold Tuning" and "Retrieval Blindness").

Injection rate: the share of queries that surfaced at least one memory above the threshold (healthy: 40-55 %;
above 70-80 % the threshold is too low and memories become noise). Retrieval-blindness rate: the share that
surfaced none although the tenant has memories the query reached as candidates (above 20 %: the threshold is
too high or a ranker is failing). Counted in Redis by day, so every gateway process adds to the same numbers
and the stats cover a rolling window; Prometheus counters carry the same per tenant for dashboards.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

log = logging.getLogger("mnemoflow.retrieval")

KEY_PREFIX = "mnemoflow:retrieval"
RETENTION_DAYS = 8


def outcome(matches: int, candidates: int) -> str:
    """`injected` (something passed the gate), `blind` (candidates existed, none passed) or `no_memories`."""
    if matches > 0:
        return "injected"
    return "blind" if candidates > 0 else "no_memories"


def _key(tenant: str, day: datetime) -> str:
    return f"{KEY_PREFIX}:{tenant}:{day:%Y%m%d}"


def record_many(client: redis.Redis, counts: Mapping[tuple[str, str], int], *, now: datetime | None = None) -> None:
    """Count queries' outcomes, {(tenant, outcome): queries}, in one round trip (never fails the caller)."""
    if not counts:
        return
    day = now or datetime.now(UTC)
    try:
        with client.pipeline(transaction=False) as pipe:
            for (tenant, result), n in counts.items():
                key = _key(tenant, day)
                pipe.hincrby(key, "queries", n)
                pipe.hincrby(key, result, n)
                pipe.expire(key, RETENTION_DAYS * 86400)
            pipe.execute()
    except redis.RedisError as exc:
        log.debug("cannot count %d query outcomes: %s", sum(counts.values()), exc)


def summary(client: redis.Redis, tenant: str, *, days: int = 7, now: datetime | None = None) -> dict[str, Any]:
    """The tenant's queries over the last `days` days, with injection and blindness rates (None: no queries)."""
    today = now or datetime.now(UTC)
    with client.pipeline(transaction=False) as pipe:
        for back in range(days):
            pipe.hgetall(_key(tenant, today - timedelta(days=back)))
        buckets = pipe.execute()
    totals = {"queries": 0, "injected": 0, "blind": 0, "no_memories": 0}
    for bucket in buckets:
        for field, value in bucket.items():
            name = field.decode() if isinstance(field, bytes) else field
            if name in totals:
                totals[name] += int(value)
    queries = totals["queries"]
    return {
        "window_days": days,
        **totals,
        "injection_rate": round(totals["injected"] / queries, 4) if queries else None,
        "blindness_rate": round(totals["blind"] / queries, 4) if queries else None,
    }
