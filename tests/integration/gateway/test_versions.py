"""Versions of a fact through the API: a client's `supersedes` link retires the older memory (status, `valid_to`,
history), deleting the link or the newer memory makes it current again, and a memory's history lists every change
(a real gateway app in process, a real database)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from services.gateway.app import create_app

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def client(settings):
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def add(client: TestClient, tenant: str, content: str, **fields) -> dict:
    response = client.post("/memory/add", json={"content": content, "user_id": tenant, **fields})
    assert response.status_code == 200, response.text
    return response.json()


def get(client: TestClient, tenant: str, memory_id: str) -> dict:
    response = client.get(f"/memory/{memory_id}", params={"user_id": tenant})
    assert response.status_code == 200, response.text
    return response.json()


def history(client: TestClient, tenant: str, memory_id: str) -> list[dict]:
    response = client.get(f"/memory/{memory_id}/history", params={"user_id": tenant})
    assert response.status_code == 200, response.text
    return response.json()["items"]


def link(client: TestClient, tenant: str, newer: str, older: str) -> None:
    body = {"src_id": newer, "dst_id": older, "kind": "supersedes", "user_id": tenant}
    response = client.post("/memory/link", json=body)
    assert response.status_code == 200, response.text


def test_a_client_link_retires_the_older_memory_and_deleting_the_link_restores_it(client, tenant):
    old = add(client, tenant, "I live in Paris.", occurred_at="2026-01-10T09:00:00Z")
    new = add(client, tenant, "We moved to Berlin.", occurred_at="2026-03-01T09:00:00Z")
    link(client, tenant, new["id"], old["id"])
    retired = get(client, tenant, old["id"])
    assert retired["status"] == "superseded"
    assert retired["valid_to"].startswith("2026-03-01T09:00:00")
    assert get(client, tenant, new["id"])["status"] == "active"
    assert [(c["event"], c["other_id"]) for c in history(client, tenant, old["id"])] == [
        ("created", None),
        ("superseded", new["id"]),
    ]
    assert [c["event"] for c in history(client, tenant, new["id"])] == ["created", "supersedes"]

    params = {"src_id": new["id"], "dst_id": old["id"], "kind": "supersedes", "user_id": tenant}
    undone = client.delete("/memory/link", params=params)
    assert undone.status_code == 200, undone.text
    assert undone.json()["restored"] is True
    current = get(client, tenant, old["id"])
    assert (current["status"], current["valid_to"]) == ("active", None)
    assert history(client, tenant, old["id"])[-1]["event"] == "restored"
    again = client.delete("/memory/link", params=params)
    assert again.status_code == 404 and "no supersedes link" in again.json()["error"]["message"]


def test_deleting_the_newer_memory_makes_the_older_current_unless_another_still_replaces_it(client, tenant):
    old = add(client, tenant, "My phone is a Pixel 6.", occurred_at="2026-01-01T00:00:00Z")
    middle = add(client, tenant, "I switched to an iPhone 15.", occurred_at="2026-02-01T00:00:00Z")
    newest = add(client, tenant, "Now I use a Fairphone 5.", occurred_at="2026-03-01T00:00:00Z")
    link(client, tenant, middle["id"], old["id"])
    link(client, tenant, newest["id"], old["id"])
    assert client.delete(f"/memory/{middle['id']}", params={"user_id": tenant}).status_code == 200
    assert get(client, tenant, old["id"])["status"] == "superseded"  # the newest still replaces it
    assert client.delete(f"/memory/{newest['id']}", params={"user_id": tenant}).status_code == 200
    assert get(client, tenant, old["id"])["status"] == "active"
    events = [(c["event"], c["other_id"], c["detail"].get("reason")) for c in history(client, tenant, old["id"])]
    assert events[-1] == ("restored", newest["id"], "newer memory deleted")


def test_history_keeps_the_content_before_each_edit(client, tenant):
    memory = add(client, tenant, "The meeting is on Monday.")
    for content in ("The meeting is on Tuesday.", "The meeting is on Friday at noon."):
        response = client.patch(f"/memory/{memory['id']}", json={"content": content, "user_id": tenant})
        assert response.status_code == 200, response.text
    items = history(client, tenant, memory["id"])
    assert [(c["event"], c["content"]) for c in items] == [
        ("created", "The meeting is on Monday."),
        ("content", "The meeting is on Monday."),
        ("content", "The meeting is on Tuesday."),
    ]
    assert get(client, tenant, memory["id"])["content"] == "The meeting is on Friday at noon."


def test_history_and_unlink_of_another_tenant_are_not_found(client, tenant):
    mine = add(client, tenant, "A note of my own.")
    other = f"{tenant}-other"
    assert client.get(f"/memory/{mine['id']}/history", params={"user_id": other}).status_code == 404
    theirs = add(client, other, "A note of theirs.")
    params = {"src_id": theirs["id"], "dst_id": mine["id"], "kind": "supersedes", "user_id": other}
    assert client.delete("/memory/link", params=params).status_code == 404
    link_body = {"src_id": theirs["id"], "dst_id": mine["id"], "kind": "supersedes", "user_id": other}
    assert client.post("/memory/link", json=link_body).status_code == 404
    assert get(client, tenant, mine["id"])["status"] == "active"
