"""Per-tenant quotas: a token bucket per tenant and quota in Redis, checked and taken by one atomic script, so
every gateway process draws on the same buckets.

The buckets (shared/backpressure.py): queries; memories written (an add or an update is 1, a batch its items);
documents ingested. A request that does not fit is answered 429 with Retry-After, saying which quota and when.
When Redis cannot be reached the check fails open: the request goes through unchecked, counted in
`mnemoflow_rate_limit_unchecked_total` and logged once per pause, and for `pause_seconds` no check is tried
(a hanging Redis would otherwise cost every request its socket timeout). Refusing every request because the
limiter's store is down would turn a Redis outage into a full one; queries already run without Redis.
"""

from __future__ import annotations

import logging
import time

import redis

from services.gateway import metrics
from shared.backpressure import UNITS, Quota, RateLimits, bucket_key
from shared.errors import RateLimited
from shared.lifecycle.activity import ACTIVE_QUERIES_KEY, new_token, query_started

log = logging.getLogger("mnemoflow.gateway")

# KEYS[1]: the bucket (a hash of tokens and when they were counted); ARGV: burst, refill per second, cost.
# With KEYS[2] (the active queries' sorted set) and ARGV[4], ARGV[5] (a query's token and its expiry), an allowed
# query is also counted active: one round trip where the query's path had two.
# Redis's clock, not the gateways': every process refills the bucket at the same pace. A full bucket is no key
# at all: it expires once it would have refilled.
_TAKE = """
local burst = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local held = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(held[1])
local at = tonumber(held[2])
if tokens == nil or at == nil then
    tokens = burst
else
    tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
end
local allowed = 0
if tokens >= cost then
    tokens = tokens - cost
    allowed = 1
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) / rate * 1000) + 1000)
if allowed == 1 and #KEYS > 1 then
    redis.call('ZADD', KEYS[2], ARGV[5], ARGV[4])
end
return {allowed, tostring(tokens)}
"""

_SETTINGS = {
    Quota.QUERIES: ("MNEMOFLOW_RATE_LIMIT_QUERY_BURST", "MNEMOFLOW_RATE_LIMIT_QUERIES_PER_SECOND"),
    Quota.WRITES: ("MNEMOFLOW_RATE_LIMIT_WRITE_BURST", "MNEMOFLOW_RATE_LIMIT_WRITES_PER_SECOND"),
    Quota.INGEST: ("MNEMOFLOW_RATE_LIMIT_INGEST_BURST", "MNEMOFLOW_RATE_LIMIT_INGESTS_PER_SECOND"),
}


class RateLimiter:
    """The gateway's quota checks against the buckets in `client`."""

    def __init__(self, client: redis.Redis, limits: RateLimits, *, pause_seconds: float = 5.0) -> None:
        self.limits = limits
        self.pause_seconds = pause_seconds
        self._client = client
        self._take = client.register_script(_TAKE)  # EVALSHA, loading the script when Redis lacks it
        self._unchecked_until = 0.0

    def charge(self, tenant: str, quota: Quota, units: int = 1) -> None:
        """Take `units` from the tenant's `quota`; raises RateLimited (429) when they do not fit now."""
        if self._checking():
            self._take_or_refuse(tenant, quota, units)

    def admit_query(self, tenant: str, ttl_seconds: float, units: int = 1) -> str | None:
        """Charge a query (`units`: the model windows it fills) to the tenant's quota and count it active
        (shared.lifecycle.activity), in one round trip. Returns its active-query token (None when Redis could not
        count it); raises RateLimited like `charge`."""
        if not self._checking():
            return query_started(self._client, ttl_seconds)
        token, expires = new_token(ttl_seconds)
        counted = self._take_or_refuse(tenant, Quota.QUERIES, units, active=(token, expires))
        return token if counted else None

    def _checking(self) -> bool:
        if not self.limits.enabled:
            return False
        if time.monotonic() < self._unchecked_until:
            metrics.RATE_LIMIT_UNCHECKED.inc()
            return False
        return True

    def _take_or_refuse(self, tenant: str, quota: Quota, units: int, active: tuple[str, float] | None = None) -> bool:
        """True when taken, False when Redis did not answer (unchecked); raises RateLimited when refused."""
        bucket = self.limits.bucket(quota)
        cost = bucket.cost_of(units)
        keys = [bucket_key(quota, tenant)]
        args: list[str | float] = [bucket.burst, bucket.per_second, cost]
        if active is not None:
            keys.append(ACTIVE_QUERIES_KEY)
            args.extend(active)
        try:
            allowed, tokens = self._take(keys=keys, args=args)
        except redis.RedisError as exc:
            self._unchecked_until = time.monotonic() + self.pause_seconds
            metrics.RATE_LIMIT_UNCHECKED.inc()
            log.warning(
                "rate limits unchecked for %.0f s: Redis did not answer (%s); requests go through meanwhile",
                self.pause_seconds,
                exc,
            )
            return False
        if int(allowed):
            return True
        retry_after = bucket.seconds_until(cost, float(tokens))
        metrics.RATE_LIMITED.labels(quota=str(quota)).inc()
        burst_name, rate_name = _SETTINGS[quota]
        raise RateLimited(
            f"user_id {tenant!r} is over its {quota} limit: {bucket.burst:,} {UNITS[quota]} at once, then "
            f"{bucket.per_second:g} a second ({burst_name}, {rate_name}); this request counts {cost:,}. "
            f"Retry in {retry_after} s.",
            details={
                "limit": str(quota),
                "burst": bucket.burst,
                "per_second": bucket.per_second,
                "cost": cost,
                "retry_after_seconds": retry_after,
            },
            retry_after=retry_after,
        )
