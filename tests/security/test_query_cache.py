"""The query-embedding cache is per tenant: one tenant's query is never answered from another's entry, so its
speed (or its `embed` stage timing) cannot tell it what another tenant asked."""

from __future__ import annotations

import time
import uuid

import pytest
import redis

pytestmark = pytest.mark.e2e


def test_two_tenants_asking_the_same_question_do_not_share_a_cache_entry(servers, alice, bob):
    client = redis.Redis.from_url(servers["redis_url"])

    def entries() -> int:
        return sum(1 for _ in client.scan_iter("mnemoflow:qemb:*", count=1000))

    def settled_at(expected: int) -> int:
        """The count once the gateway's aftermath thread has written its entries behind (it does every 0.1 s)."""
        deadline = time.monotonic() + 10
        while entries() != expected and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # and no entry more after a few more flushes
        return entries()

    question = {"query": f"when is the appointment with dr {uuid.uuid4().hex}?", "explain": True}
    before = entries()
    first = alice.post("/memory/query", json=question)
    assert first.status_code == 200 and "embed" in first.json()["timings_ms"]
    assert settled_at(before + 1) == before + 1
    assert alice.post("/memory/query", json=question).status_code == 200
    assert settled_at(before + 1) == before + 1  # alice's second asking is answered from her entry
    assert bob.post("/memory/query", json=question).status_code == 200
    assert settled_at(before + 2) == before + 2  # bob's was embedded for him: alice's entry did not answer it
