"""Queries in flight, counted in Redis so the decay cycle can stay out of their way (decay seed: "skip if
active_q > 0").

A sorted set of query tokens scored by an expiry time rather than a counter: a gateway that dies mid-query
cannot leave the count stuck above zero; its token simply expires.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence

import redis

log = logging.getLogger("mnemoflow.activity")

ACTIVE_QUERIES_KEY = "mnemoflow:queries:active"


def new_token(ttl_seconds: float) -> tuple[str, float]:
    """A query's token and its score in `ACTIVE_QUERIES_KEY` (when it expires, if nobody uncounts it)."""
    return uuid.uuid4().hex, time.time() + ttl_seconds


def query_started(client: redis.Redis, ttl_seconds: float) -> str | None:
    """Count a query as active (for at most `ttl_seconds`); None when Redis is unreachable (never fail a query)."""
    token, expires = new_token(ttl_seconds)
    try:
        client.zadd(ACTIVE_QUERIES_KEY, {token: expires})
    except redis.RedisError as exc:
        log.debug("cannot count an active query: %s", exc)
        return None
    return token


def query_finished(client: redis.Redis, token: str | None) -> None:
    queries_finished(client, [token])


def queries_finished(client: redis.Redis, tokens: Sequence[str | None]) -> None:
    """Uncount queries (the tokens `query_started` gave; None for the ones it could not count)."""
    counted = [token for token in tokens if token is not None]
    if not counted:
        return
    try:
        client.zrem(ACTIVE_QUERIES_KEY, *counted)
    except redis.RedisError as exc:
        log.debug("cannot uncount %d active queries: %s", len(counted), exc)


def active_queries(client: redis.Redis) -> int:
    """Queries in flight now (expired tokens of dead gateways dropped first)."""
    now = time.time()
    with client.pipeline(transaction=False) as pipe:
        pipe.zremrangebyscore(ACTIVE_QUERIES_KEY, "-inf", now)
        pipe.zcount(ACTIVE_QUERIES_KEY, now, "+inf")
        _, count = pipe.execute()
    return int(count)
