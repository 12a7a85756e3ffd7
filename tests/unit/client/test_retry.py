"""Retries against a real HTTP server on loopback: 429 and 503 with Retry-After, backoff, broken connections, and
which calls may be sent twice."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from mnemoflow_client import AsyncMnemoflow, Mnemoflow, RateLimited, RetryPolicy, TransportError, Unavailable
from mnemoflow_client.retry import parse_retry_after

from tests.unit.client.conftest import DROP, Answer, FakeGateway

MEMORY = {
    "id": str(uuid.uuid4()),
    "user_id": "alice",
    "content": "Alice prefers green tea",
    "primary_sector": "semantic",
    "sectors": ["semantic"],
    "tags": [],
    "metadata": {},
    "salience": 0.5,
    "decay_lambda": 0.01,
    "coactivations": 0,
    "tier": "hot",
    "status": "active",
    "confidence": 1.0,
    "compression": "full",
    "created_at": "2024-05-01T10:00:00Z",
    "updated_at": "2024-05-01T10:00:00Z",
    "last_seen_at": "2024-05-01T10:00:00Z",
}
BUSY = {"error": {"code": "rate_limited", "message": "too many memories written; retry in 1 s"}}
DOWN = {"error": {"code": "service_unavailable", "message": "the database is unreachable; retry in 5 s"}}


def fast(retries: int = 3, waits: list | None = None, **more) -> RetryPolicy:
    """A policy whose computed backoffs are milliseconds, recording each wait."""
    record = (lambda n, seconds, why: waits.append((n, seconds, why))) if waits is not None else None
    return RetryPolicy(retries=retries, backoff=0.01, max_backoff=0.02, jitter=False, on_retry=record, **more)


def test_delays_double_up_to_the_cap_and_stop_after_the_retries():
    policy = RetryPolicy(retries=4, backoff=0.5, max_backoff=1.5, jitter=False)
    assert [policy.delay(n) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 1.5, 1.5, None]


def test_jitter_keeps_a_delay_between_half_and_all_of_it():
    policy = RetryPolicy(retries=1, backoff=2.0)
    assert all(1.0 <= policy.delay(1) <= 2.0 for _ in range(200))  # type: ignore[operator]


def test_retry_after_is_taken_as_said_unless_longer_than_the_policy_waits():
    policy = RetryPolicy(retries=2, max_retry_after=10)
    assert policy.delay(1, retry_after=7) == 7
    assert policy.delay(1, retry_after=11) is None
    assert policy.delay(3, retry_after=1) is None


def test_retry_after_reads_seconds_and_http_dates():
    now = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(format_datetime(now + timedelta(seconds=30), usegmt=True), now=now) == 30.0
    assert parse_retry_after(format_datetime(now - timedelta(seconds=30), usegmt=True), now=now) == 0.0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None


def test_a_429_is_retried_after_its_retry_after(fake_gateway: FakeGateway):
    fake_gateway.script = [Answer(429, BUSY, {"Retry-After": "1"}), Answer(200, MEMORY)]
    waits: list = []
    with Mnemoflow(fake_gateway.url, retries=fast(waits=waits)) as client:
        memory = client.get(MEMORY["id"])
    assert memory.content == MEMORY["content"]
    assert [(n, seconds) for n, seconds, _ in waits] == [(1, 1.0)]
    assert "429" in waits[0][2]
    assert len(fake_gateway.seen) == 2


def test_a_503_without_retry_after_backs_off_and_each_retry_waits_longer(fake_gateway: FakeGateway):
    fake_gateway.script = [Answer(503, DOWN), Answer(503, DOWN), Answer(200, MEMORY)]
    waits: list = []
    with Mnemoflow(fake_gateway.url, retries=fast(waits=waits)) as client:
        client.get(MEMORY["id"])
    assert [seconds for _, seconds, _ in waits] == [0.01, 0.02]


def test_when_the_retries_run_out_the_error_carries_the_servers_answer(fake_gateway: FakeGateway):
    fake_gateway.script = [Answer(429, BUSY, {"Retry-After": "0", "X-Request-ID": "req-42"})] * 3
    with Mnemoflow(fake_gateway.url, retries=fast(retries=2)) as client, pytest.raises(RateLimited) as raised:
        client.get(MEMORY["id"])
    error = raised.value
    assert (error.status, error.code, error.retry_after, error.request_id) == (429, "rate_limited", 0.0, "req-42")
    assert error.message == BUSY["error"]["message"]
    assert len(fake_gateway.seen) == 3


def test_a_retry_after_longer_than_the_policy_allows_is_raised_at_once(fake_gateway: FakeGateway):
    fake_gateway.script = [Answer(503, DOWN, {"Retry-After": "120"})]
    with Mnemoflow(fake_gateway.url, retries=fast(max_retry_after=60)) as client, pytest.raises(Unavailable) as raised:
        client.get(MEMORY["id"])
    assert raised.value.retry_after == 120.0
    assert len(fake_gateway.seen) == 1


def test_a_503_is_retried_even_for_a_call_that_is_not_idempotent(fake_gateway: FakeGateway):
    # the gateway answers 503 after rolling back: nothing was done, so a reinforce may be sent again
    done = {"ok": True, "id": MEMORY["id"], "salience": 0.6}
    fake_gateway.script = [Answer(503, DOWN, {"Retry-After": "0"}), Answer(200, done)]
    with Mnemoflow(fake_gateway.url, retries=fast()) as client:
        assert client.reinforce(MEMORY["id"]).salience == 0.6
    assert [seen.path for seen in fake_gateway.seen] == ["/memory/reinforce"] * 2


def test_a_connection_broken_mid_call_is_retried_for_an_idempotent_call(fake_gateway: FakeGateway):
    fake_gateway.script = [DROP, Answer(200, MEMORY)]
    with Mnemoflow(fake_gateway.url, retries=fast()) as client:
        assert client.get(MEMORY["id"]).id == uuid.UUID(MEMORY["id"])
    assert len(fake_gateway.seen) == 2


def test_an_add_is_retried_after_a_broken_connection_since_the_same_content_is_the_same_memory(
    fake_gateway: FakeGateway,
):
    fake_gateway.script = [DROP, Answer(200, MEMORY | {"deduplicated": True})]
    with Mnemoflow(fake_gateway.url, retries=fast()) as client:
        assert client.add("Alice prefers green tea").deduplicated
    assert [seen.json()["content"] for seen in fake_gateway.seen] == ["Alice prefers green tea"] * 2


def test_a_reinforce_is_not_sent_twice_after_a_broken_connection(fake_gateway: FakeGateway):
    fake_gateway.script = [DROP, Answer(200, {"ok": True, "id": MEMORY["id"], "salience": 0.6})]
    with Mnemoflow(fake_gateway.url, retries=fast()) as client, pytest.raises(TransportError) as raised:
        client.reinforce(MEMORY["id"])
    assert raised.value.status is None and raised.value.code == "unreachable"
    assert len(fake_gateway.seen) == 1


def test_a_batch_is_retried_with_the_same_idempotency_key(fake_gateway: FakeGateway):
    accepted = {"job_id": str(uuid.uuid4()), "status": "existing", "items": 2, "chunks": None, "status_url": "/jobs/x"}
    fake_gateway.script = [DROP, Answer(202, accepted)]
    with Mnemoflow(fake_gateway.url, retries=fast()) as client:
        assert client.batch(["one", "two"]).status == "existing"
    keys = [seen.json()["idempotency_key"] for seen in fake_gateway.seen]
    assert len(keys) == 2 and keys[0] == keys[1] and keys[0].startswith("mnemoflow-client-")


def test_a_refused_connection_is_retried_for_any_call_then_raised():
    waits: list = []
    client = Mnemoflow("http://127.0.0.1:9", retries=fast(retries=2, waits=waits))
    with client, pytest.raises(TransportError) as raised:
        client.reinforce(MEMORY["id"])  # not idempotent, but nothing reached a server
    assert len(waits) == 2
    assert "127.0.0.1:9" in raised.value.message and "MNEMOFLOW_URL" in raised.value.message


def test_the_async_client_retries_alike(fake_gateway: FakeGateway):
    fake_gateway.script = [Answer(429, BUSY, {"Retry-After": "0"}), DROP, Answer(200, MEMORY)]
    waits: list = []

    async def fetch():
        async with AsyncMnemoflow(fake_gateway.url, retries=fast(waits=waits)) as client:
            return await client.get(MEMORY["id"])

    assert asyncio.run(fetch()).content == MEMORY["content"]
    assert [n for n, _, _ in waits] == [1, 2]
    assert len(fake_gateway.seen) == 3


def test_zero_retries_raise_the_first_error(fake_gateway: FakeGateway):
    fake_gateway.script = [Answer(503, DOWN, {"Retry-After": "0"})]
    with Mnemoflow(fake_gateway.url, retries=0) as client, pytest.raises(Unavailable):
        client.get(MEMORY["id"])
    assert len(fake_gateway.seen) == 1
