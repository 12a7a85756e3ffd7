"""The evidence gate through the gateway: a question about nothing the store holds gets nothing, one about what it
holds gets the memory, and `filters.min_evidence: 0` turns the gate off (a real gateway app in process, a real
database and broker, the shipped local model in a store of its own: a store keeps one model per sector)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from services.gateway.app import create_app
from shared.config import Settings
from shared.retrieval.evidence import GateParams

pytestmark = pytest.mark.integration

MEMORIES = (
    "Alice prefers green tea in the morning",
    "Tom fixed the chain of his bike on Saturday",
    "The quarterly report is due on Friday",
    "We adopted a puppy and named him Max",
)


@pytest.fixture(scope="module")
def client(make_store, servers):
    url, _ = make_store("evidence_gate")
    settings = Settings(
        database_url=url, redis_url=servers["redis_url"], environment="development", embedding_provider="local"
    )
    assert settings.min_evidence == GateParams().min_evidence  # the shipped gate
    with TestClient(create_app(settings)) as test_client:
        for content in MEMORIES:
            response = test_client.post("/memory/add", json={"content": content, "user_id": "alice"})
            assert response.status_code == 200, response.text
        yield test_client


def query(client: TestClient, text: str, **filters: float) -> dict:
    body = {"query": text, "user_id": "alice", "explain": True, "reinforce": False, "filters": filters}
    response = client.post("/memory/query", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_question_about_what_the_store_holds_returns_the_memory_with_its_evidence(client):
    answer = query(client, "What does Alice drink in the morning?")
    assert answer["matches"][0]["content"] == MEMORIES[0]
    components = answer["matches"][0]["trace"]["components"]
    assert components["evidence"] >= GateParams().min_evidence
    assert components["coverage"] > 0.5
    assert answer["evidence"] == max(m["trace"]["components"]["evidence"] for m in answer["matches"])


# Each shares a word with a memory ("Saturday", "report"), so the gate on relevance lets a memory through.
@pytest.mark.parametrize("text", ["Who won the Saturday football match?", "How do I report a bug in Python?"])
def test_an_off_topic_question_returns_nothing_though_it_had_candidates(client, text):
    answer = query(client, text)
    assert answer["matches"] == []
    assert answer["candidates"] > 0 and answer["evidence"] < GateParams().min_evidence
    assert query(client, text, min_evidence=0)["matches"]  # the evidence gate dropped them, nothing else


def test_a_name_the_store_never_saw_counts_against_the_question(client):
    answer = query(client, "What does Zorblax drink in the morning?")
    assert answer["unknown_names"] == ["Zorblax"]
    assert answer["matches"] == []
    ungated = query(client, "What does Zorblax drink in the morning?", min_evidence=0)
    assert ungated["matches"][0]["content"] == MEMORIES[0]  # the tea is still the nearest memory
    assert ungated["matches"][0]["trace"]["components"]["unknown_names"] == 1.0
