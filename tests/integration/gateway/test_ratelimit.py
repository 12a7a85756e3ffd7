"""Per-tenant rate limits: token buckets in a real Valkey, shared by every gateway process, 429 with Retry-After
and a message naming the limit; generous defaults; failing open when Valkey does not answer."""

from __future__ import annotations

import time
import uuid

import pytest
import redis
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from infra.embedded import free_port
from services.gateway.app import create_app
from services.gateway.ratelimit import RateLimiter
from shared.backpressure import Bucket, Quota, RateLimits, bucket_key
from shared.errors import RateLimited
from shared.lifecycle.activity import ACTIVE_QUERIES_KEY, queries_finished

pytestmark = pytest.mark.integration

SLOW = 0.01  # tokens a second: nothing refills while a test runs


def unchecked() -> float:
    return REGISTRY.get_sample_value("mnemoflow_rate_limit_unchecked_total") or 0.0


@pytest.fixture
def valkey(servers) -> redis.Redis:
    client = redis.Redis.from_url(servers["redis_url"])
    yield client
    client.close()


def test_two_gateway_processes_draw_on_one_bucket_and_the_429_says_which_limit_and_when(valkey, tenant):
    limits = RateLimits(queries=Bucket(burst=5, per_second=SLOW))
    first, second = RateLimiter(valkey, limits), RateLimiter(valkey, limits)  # as two gateway processes
    for limiter in (first, second, first, second, first):
        limiter.charge(tenant, Quota.QUERIES)
    with pytest.raises(RateLimited) as refused:
        second.charge(tenant, Quota.QUERIES)
    error = refused.value
    assert error.status_code == 429 and error.retry_after is not None and error.retry_after >= 1
    assert "queries limit" in error.message and "MNEMOFLOW_RATE_LIMIT_QUERY_BURST" in error.message
    assert f"Retry in {error.retry_after} s" in error.message
    first.charge(f"{tenant}-other", Quota.QUERIES)  # another tenant's bucket is its own
    first.charge(tenant, Quota.WRITES)  # and so is another quota


def _active(valkey: redis.Redis, token: str | None) -> bool:
    return token is not None and valkey.zscore(ACTIVE_QUERIES_KEY, token) is not None


def test_an_admitted_query_is_charged_and_counted_active_in_one_step_and_a_refused_one_is_not_counted(valkey, tenant):
    limiter = RateLimiter(valkey, RateLimits(queries=Bucket(burst=2, per_second=SLOW)))
    tokens = [limiter.admit_query(tenant, ttl_seconds=30) for _ in range(2)]
    assert all(_active(valkey, token) for token in tokens) and tokens[0] != tokens[1]
    assert time.time() + 25 < valkey.zscore(ACTIVE_QUERIES_KEY, tokens[0]) <= time.time() + 30  # it expires
    before = valkey.zcard(ACTIVE_QUERIES_KEY)
    with pytest.raises(RateLimited, match="queries limit"):
        limiter.admit_query(tenant, ttl_seconds=30)
    assert valkey.zcard(ACTIVE_QUERIES_KEY) == before  # refused: never counted as running
    with pytest.raises(RateLimited):
        limiter.charge(tenant, Quota.QUERIES)  # the same bucket as charge's
    queries_finished(valkey, tokens)
    assert not any(_active(valkey, token) for token in tokens)


def test_with_limits_off_a_query_is_still_counted_active(valkey, tenant):
    limiter = RateLimiter(valkey, RateLimits(enabled=False))
    token = limiter.admit_query(tenant, ttl_seconds=30)
    assert _active(valkey, token) and not valkey.exists(bucket_key(Quota.QUERIES, tenant))
    queries_finished(valkey, [token])


def test_the_bucket_refills_at_its_rate(valkey, tenant):
    limiter = RateLimiter(valkey, RateLimits(ingest=Bucket(burst=1, per_second=20)))
    limiter.charge(tenant, Quota.INGEST)
    with pytest.raises(RateLimited):
        limiter.charge(tenant, Quota.INGEST)
    time.sleep(0.2)  # 4 tokens' worth at 20 a second, capped at the burst of 1
    limiter.charge(tenant, Quota.INGEST)


def test_the_defaults_let_3000_adds_and_1000_queries_through_back_to_back(valkey, tenant):
    limiter = RateLimiter(valkey, RateLimits())
    for _ in range(3_000):
        limiter.charge(tenant, Quota.WRITES)
    for _ in range(1_000):
        limiter.charge(tenant, Quota.QUERIES)
    limiter.charge(tenant, Quota.WRITES, 50_000)  # and then a batch of the largest size


def test_with_valkey_unreachable_requests_go_through_unchecked_and_are_counted(tenant, caplog):
    nowhere = redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=1)
    limiter = RateLimiter(nowhere, RateLimits(queries=Bucket(burst=1, per_second=SLOW)), pause_seconds=60)
    before = unchecked()
    for _ in range(5):  # the burst is 1: checked, the last four would be refused
        limiter.charge(tenant, Quota.QUERIES)
    assert unchecked() - before == 5
    warnings = [r for r in caplog.records if "rate limits unchecked" in r.getMessage()]
    assert len(warnings) == 1  # once per pause, not once per request
    assert limiter.admit_query(tenant, ttl_seconds=30) is None  # a query goes through too, uncounted
    fresh = RateLimiter(nowhere, RateLimits(queries=Bucket(burst=1, per_second=SLOW)), pause_seconds=60)
    assert fresh.admit_query(tenant, ttl_seconds=30) is None  # and the one that finds Redis down first


def test_the_gateway_answers_429_with_retry_after_and_a_batch_costs_its_items(settings):
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    limited = settings.model_copy(
        update={
            "rate_limit_query_burst": 2,
            "rate_limit_queries_per_second": SLOW,
            "rate_limit_write_burst": 10,
            "rate_limit_writes_per_second": SLOW,
        }
    )
    with TestClient(create_app(limited)) as client:
        query = {"query": "anything about ferries?", "user_id": tenant}
        assert [client.post("/memory/query", json=query).status_code for _ in range(2)] == [200, 200]
        refused = client.post("/memory/query", json=query)
        assert refused.status_code == 429, refused.text
        assert int(refused.headers["Retry-After"]) >= 1
        error = refused.json()["error"]
        assert error["code"] == "rate_limited" and "queries limit" in error["message"]
        assert error["details"]["limit"] == "queries" and error["details"]["retry_after_seconds"] >= 1

        batch = {"items": [{"content": f"ferry note {i}"} for i in range(8)], "user_id": tenant}
        assert client.post("/memory/batch", json=batch).status_code == 202  # 8 of the 10
        note = {"content": "the last ferry leaves at ten", "user_id": tenant}
        assert [client.post("/memory/add", json=note).status_code for _ in range(3)] == [200, 200, 429]
