"""`POST /memory/add` from a client that never sends `follows` (OpenMemory's, mem0's, LangGraph's): a conversation
named in the metadata is linked turn by turn, and a metadata timestamp is when it occurred (a real gateway app in
process, a real database)."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from services.gateway.app import create_app

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def client(settings):
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def next_links(db, tenant: str) -> set[tuple[str, str]]:
    with db.session(tenant) as s:
        rows = s.execute(
            text("SELECT src_id, dst_id FROM waypoints WHERE user_id = :u AND kind = 'next'"), {"u": tenant}
        ).all()
    return {(str(r.src_id), str(r.dst_id)) for r in rows}


def add(client: TestClient, tenant: str, content: str, **fields) -> dict:
    response = client.post("/memory/add", json={"content": content, "user_id": tenant, **fields})
    assert response.status_code == 200, response.text
    return response.json()


def test_turns_added_with_a_session_id_are_linked_and_a_duplicate_is_not(client, db, tenant):
    a = add(client, tenant, "Ivo: where did you park the camper van?", metadata={"session_id": "s"})
    b = add(client, tenant, "Lea: behind the old mill", metadata={"session_id": "s", "namespace": "trip"})
    other = add(client, tenant, "Kai: the budget is approved", metadata={"session_id": "t"})
    again = add(client, tenant, "Ivo: where did you park the camper van?", metadata={"session_id": "s"})
    c = add(client, tenant, "Ivo: by the river?", metadata={"session_id": "s"})
    assert again["deduplicated"] and again["id"] == a["id"]
    assert next_links(db, tenant) == {(a["id"], b["id"]), (b["id"], c["id"])}
    assert other["id"] not in {i for pair in next_links(db, tenant) for i in pair}


def test_a_namespace_or_graph_id_alone_links_nothing(client, db, tenant):
    for i in range(3):
        add(client, tenant, f"note {i} about the garden shed", metadata={"namespace": "n", "graph_id": "g"})
    assert next_links(db, tenant) == set()


def test_an_explicit_follows_still_works_and_wins(client, db, tenant):
    a = add(client, tenant, "Ana: shall we take the night train?", metadata={"thread_id": "x"})
    b = add(client, tenant, "Ben: the report is due Friday", metadata={"thread_id": "x"})
    c = add(client, tenant, "Ana: the sleeper leaves at ten", metadata={"thread_id": "x"}, follows=a["id"])
    d = add(client, tenant, "Ben: fine by me", metadata={"thread_id": "x"})
    assert next_links(db, tenant) == {(a["id"], b["id"]), (a["id"], c["id"]), (c["id"], d["id"])}
    unknown = client.post(
        "/memory/add",
        json={"content": "orphan", "user_id": tenant, "metadata": {"thread_id": "x"}, "follows": str(uuid.uuid4())},
    )
    assert unknown.status_code == 404 and "follows" in unknown.json()["error"]["message"]


def test_deleting_the_last_turn_then_adding_the_next_starts_afresh(client, db, tenant):
    a = add(client, tenant, "Ivo: see you at seven", metadata={"run_id": "r"})
    assert client.delete(f"/memory/{a['id']}", params={"user_id": tenant}).status_code == 200
    b = add(client, tenant, "Lea: make it eight", metadata={"run_id": "r"})
    c = add(client, tenant, "Ivo: eight it is", metadata={"run_id": "r"})
    assert next_links(db, tenant) == {(b["id"], c["id"])}


def test_a_metadata_timestamp_is_when_it_occurred_unless_occurred_at_is_given(client, tenant):
    timed = add(client, tenant, "Lea: we landed", metadata={"timestamp": "2023-05-08T13:56:00"})
    assert timed["occurred_at"] == "2023-05-08T13:56:00Z" and timed["metadata"] == {"timestamp": "2023-05-08T13:56:00"}
    dated = add(client, tenant, "Ivo: the ferry was late", metadata={"date": "2023-05-09"})
    assert dated["occurred_at"] == "2023-05-09T00:00:00Z"
    given = add(
        client,
        tenant,
        "Lea: dinner at the harbour",
        occurred_at="2023-05-10T20:00:00+02:00",
        metadata={"date": "2023-05-09"},
    )
    assert given["occurred_at"] == "2023-05-10T18:00:00Z"
    untimed = add(client, tenant, "Ivo: long day", metadata={"time": "late evening"})
    assert untimed["occurred_at"] is None and untimed["metadata"] == {"time": "late evening"}
