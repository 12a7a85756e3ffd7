"""Calls that name a memory by its id alone (OpenMemory's reinforce, update, delete) with keys on: a tenant's key
reaches its own memories only, another tenant's id is 404 and changes nothing; the operator's key reaches any."""

from __future__ import annotations

import uuid

import pytest

pytestmark = pytest.mark.e2e


def test_a_tenant_s_key_cannot_reach_another_tenant_s_memory_by_id(alice, bob, keys):
    secret = f"bob's locker code {uuid.uuid4().hex[:6]}"
    memory = bob.post("/memory/add", json={"content": secret}).json()
    path = f"/memory/{memory['id']}"
    attempts = [
        alice.post("/memory/reinforce", json={"id": memory["id"], "boost": 0.5}),
        alice.patch(path, json={"content": "overwritten by alice"}),
        alice.delete(path),
        alice.get(path),
    ]
    for answer in attempts:
        assert answer.status_code == 404 and secret not in answer.text
    kept = bob.get(path).json()
    assert (kept["content"], kept["salience"], kept["user_id"]) == (secret, memory["salience"], keys.tenant_b)
    assert bob.post("/memory/reinforce", json={"id": memory["id"], "boost": 0.1}).json()["ok"] is True  # his own


def test_the_operator_key_reaches_a_memory_by_id_and_a_tenant_key_not_another_user_s_routes(operator, alice, bob, keys):
    memory = bob.post("/memory/add", json={"content": "bob's bike is blue"}).json()
    found = operator.get(f"/memory/{memory['id']}").json()
    assert found["user_id"] == keys.tenant_b
    assert operator.patch(f"/memory/{memory['id']}", json={"tags": ["checked"]}).json()["tags"] == ["checked"]
    for answer in (
        alice.get(f"/users/{keys.tenant_b}/summary"),
        alice.get(f"/users/{keys.tenant_b}/memories"),
        alice.post(f"/users/{keys.tenant_b}/summary/regenerate"),
        alice.post("/lgm/store", json={"node": "plan", "content": "x", "user_id": keys.tenant_b}),
    ):
        assert answer.status_code == 403 and "belongs to user_id" in answer.json()["error"]["message"]
    assert alice.get("/lgm/config").json()["namespace_default"] == "default"


def test_without_a_key_the_new_routes_ask_for_one(stranger):
    for answer in (stranger.get("/lgm/config"), stranger.get("/users/anyone/summary")):
        assert answer.status_code == 401
