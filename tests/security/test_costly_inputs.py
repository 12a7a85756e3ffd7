"""Inputs that cost the model far more than their size says, against a real closed gateway running the default local
model: refused by their tokens, and a burst of them queued or turned away without taking the process, its memory or
its connections from other tenants."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import psutil
import pytest
from sqlalchemy import text

from infra.embedded import free_port
from infra.processes import gateway_command, wait_healthy
from shared.db import schema_session
from tests.conftest import running, service_env
from tests.security.conftest import Keys, client

pytestmark = pytest.mark.e2e

FULL = os.environ.get("MNEMOFLOW_TEST_FULL") == "1"
RSS_GROWTH_BOUND = 600 * 1024 * 1024  # two model passes at once and the request threads' own: not one per request


@pytest.fixture(scope="module")
def model_gateway(
    servers, make_store, keys: Keys, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, int]]:
    """A closed gateway embedding with the default local model, as users run it, on a store of its own (the
    session's holds synthetic vectors); (URL, pid)."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("logs") / "costly-inputs-gateway.log"
    url, _ = make_store("costly_inputs")
    env = service_env(
        servers, **keys.env(), DATABASE_URL=url, MNEMOFLOW_EMBEDDING_PROVIDER="local", MNEMOFLOW_GATEWAY_WORKERS="1"
    )
    with running(gateway_command(host="127.0.0.1", port=port), env, log_path) as proc:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base, proc, log_path=log_path, timeout=180)
        yield base, proc.pid


def _rss(pid: int) -> int:
    process = psutil.Process(pid)
    return process.memory_info().rss + sum(child.memory_info().rss for child in process.children(recursive=True))


def test_a_text_of_many_tokens_is_refused_by_its_tokens_not_its_characters(model_gateway, keys: Keys):
    url, _ = model_gateway
    with client(url, keys.key_a) as alice:
        bomb = alice.post("/memory/add", json={"content": ">" * 99_000})  # 99,000 tokens in 99,000 characters
        assert bomb.status_code == 422, bomb.text
        message = bomb.json()["error"]["message"]
        assert "99,000 tokens" in message and "MNEMOFLOW_MAX_CONTENT_TOKENS" in message
        query = alice.post("/memory/query", json={"query": "!" * 16_000})
        assert query.status_code == 422 and "16,000 tokens" in query.json()["error"]["message"]
        patched = alice.post("/memory/add", json={"content": "Alice keeps her oars in the boathouse"}).json()
        refused = alice.patch(f"/memory/{patched['id']}", json={"content": "?" * 20_000})
        assert refused.status_code == 422 and "20,000 tokens" in refused.text
        batch = alice.post("/memory/batch", json={"items": [{"content": "fine"}, {"content": "~" * 9_000}]})
        assert batch.status_code == 422 and "items[1]" in batch.text
        lgm = alice.post("/lgm/store", json={"node": "observe", "content": "#" * 9_000})
        assert lgm.status_code == 422 and "9,000 tokens" in lgm.text
        # prose of the same length is far fewer tokens: 40,000 characters of English are ~8,000, and stored
        prose = " ".join(["the ledger of the north warehouse balances after the audit"] * 500)[:30_000]
        assert alice.post("/memory/add", json={"content": prose}).status_code == 200
        long_question = alice.post("/memory/query", json={"query": "where are the oars kept? " * 30})
        assert long_question.status_code == 200, long_question.text  # 180 tokens: within the limit


def _held_by_gateway(settings) -> int:
    with schema_session(settings, "mnemoflow.tests.costly") as session:
        return session.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name = 'mnemoflow.gateway' AND state LIKE 'idle in transaction%'"
            )
        ).scalar_one()


def test_a_burst_of_costly_adds_is_queued_or_refused_and_other_tenants_are_served(model_gateway, keys, settings):
    url, pid = model_gateway
    burst = 48 if FULL else 24
    content = "!" * 3_000  # 3,000 tokens each: 12 windows, about a second of one core
    with client(url, keys.key_a) as warm:  # the model's first pass allocates what every later one reuses
        assert warm.post("/memory/add", json={"content": content + " warm"}).status_code == 200
    before = _rss(pid)

    def add(i: int) -> httpx.Response:
        with httpx.Client(base_url=url, headers={"x-api-key": keys.key_a}, timeout=120) as alice:
            # conversation metadata: the add reads the conversation's last turn before it embeds
            body = {"content": f"{content} {i}", "metadata": {"session_id": "flood"}}
            return alice.post("/memory/add", json=body)

    with ThreadPoolExecutor(max_workers=burst) as pool:
        flood = [pool.submit(add, i) for i in range(burst)]
        with client(url, keys.key_b) as bob, httpx.Client(base_url=url, timeout=60) as probe:
            listed = bob.get("/memory/all", params={"l": 1})
            health = probe.get("/health")
            held = _held_by_gateway(settings)
        answers = [f.result() for f in flood]

    assert listed.status_code == 200, listed.text  # another tenant's read did not wait for the model
    assert health.json()["database"]["ok"], health.text  # answered (503 only for want of this store's workers)
    assert held == 0  # no add holds a connection while it waits for, or runs, the model
    statuses = sorted({a.status_code for a in answers})
    assert set(statuses) <= {200, 503}, statuses
    busy = [a for a in answers if a.status_code == 503]
    assert busy, "a burst larger than the gate's slots and queue must see some refused"
    assert all(int(a.headers["Retry-After"]) >= 1 and a.json()["error"]["code"] == "embedding_busy" for a in busy)
    assert any(a.status_code == 200 for a in answers)
    growth = _rss(pid) - before
    assert growth < RSS_GROWTH_BOUND, f"the gateway grew by {growth / 1e6:.0f} MB over a burst of {burst} adds"
