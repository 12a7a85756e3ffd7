"""OpenMemory's routes over HTTP, as its clients call them: id-only calls on a memory added with a user_id (no keys:
whoever's it is), /users/{id}/memories and /summary, and /lgm's validation and defaults."""

from __future__ import annotations

import uuid

import pytest

from tests.conftest import wait_for_job

pytestmark = pytest.mark.e2e


def test_id_only_calls_find_a_memory_added_with_a_user_id(http, tenant):
    memory = http.post("/memory/add", json={"content": "Noor parks on level 3", "user_id": tenant}).json()
    mine = f"/memory/{memory['id']}"
    assert http.get(mine).json()["user_id"] == tenant  # no user_id: the memory's own tenant
    reinforced = http.post("/memory/reinforce", json={"id": memory["id"], "boost": 0.2}).json()
    assert reinforced["ok"] is True and reinforced["salience"] == pytest.approx(memory["salience"] + 0.2)
    changed = http.patch(mine, json={"content": "Noor parks on level 4"}).json()
    assert (changed["content"], changed["user_id"]) == ("Noor parks on level 4", tenant)
    assert http.delete(mine).json() == {"ok": True, "id": memory["id"]}
    gone = http.delete(mine)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "not_found"
    missing = http.post("/memory/reinforce", json={"id": str(uuid.uuid4())})
    assert missing.status_code == 404 and "not found" in missing.json()["error"]["message"]
    other = http.post("/memory/add", json={"content": "Noor's other car", "user_id": tenant}).json()
    named = http.get(f"/memory/{other['id']}", params={"user_id": f"{tenant}-x"})  # naming a tenant: that tenant's
    assert named.status_code == 404


def test_a_user_s_memories_are_paged_with_openmemory_s_l_and_u(http, tenant):
    ids = [
        http.post("/memory/add", json={"content": f"Noor note {i}", "user_id": tenant}).json()["id"] for i in range(3)
    ]
    page = http.get(f"/users/{tenant}/memories", params={"l": 2, "u": 1}).json()
    assert page["user_id"] == tenant and page["total"] == 3 and (page["offset"], page["limit"]) == (1, 2)
    assert [m["id"] for m in page["items"]] == [ids[1], ids[0]]  # newest first
    assert http.get(f"/users/{tenant}/memories", params={"l": 0}).status_code == 422
    bad = http.get("/users/_reserved/memories")
    assert bad.status_code == 422 and "user_id" in bad.text


def test_a_user_summary_is_built_when_read_and_regenerated_in_a_job(http, tenant, worker):
    empty = http.get(f"/users/{tenant}/summary").json()
    assert (empty["summary"], empty["memory_count"], empty["sectors"]) == ("no memories yet", 0, [])
    http.post("/memory/add", json={"content": "Noor is allergic to cats", "user_id": tenant})
    built = http.get(f"/users/{tenant}/summary").json()  # a memory was added since: built again
    assert built["memory_count"] == 1 and '"Noor is allergic to cats"' in built["summary"]
    assert http.get(f"/users/{tenant}/summary").json()["updated_at"] == built["updated_at"]  # stored
    regenerating = http.post(f"/users/{tenant}/summary/regenerate")
    assert regenerating.status_code == 202 and regenerating.headers["location"].startswith("/jobs/")
    body = regenerating.json()
    assert body["summary"] == built["summary"] and body["status"] in ("queued", "existing")
    job = wait_for_job(http, body["job_id"], tenant)
    assert job["status"] == "succeeded" and job["result"]["memory_count"] == 1
    assert http.get(f"/users/{tenant}/summary").json()["updated_at"] > built["updated_at"]


def test_lgm_refuses_what_it_cannot_use_and_says_why(http, tenant):
    for body, wanted in [
        ({"content": "x", "user_id": tenant}, "node (or node_id) is required"),
        ({"node": "plan", "node_id": "act", "content": "x", "user_id": tenant}, "disagree"),
        ({"node": "plan", "content": "x", "namespace": "a\nb", "user_id": tenant}, "one line"),
    ]:
        answer = http.post("/lgm/store", json=body)
        assert answer.status_code == 422 and wanted in answer.text
    assert http.post("/lgm/retrieve", json={"node": "plan", "limit": 2, "k": 3}).status_code == 422
    quiet = http.post("/lgm/reflection", json={"namespace": f"quiet-{tenant}", "user_id": tenant})
    assert quiet.status_code == 422 and "has no memories yet" in quiet.json()["error"]["message"]


def test_lgm_uses_openmemory_s_default_namespace_and_an_unmapped_node_is_semantic(http, tenant):
    stored = http.post(
        "/lgm/store",
        json={"node": "Summarise", "content": "Noor's weekly digest", "user_id": tenant, "reflective": False},
    ).json()
    assert stored["memory"]["namespace"] == "default" and stored["memory"]["primary_sector"] == "semantic"
    assert stored["reflection"] is None
    found = http.post("/lgm/retrieve", json={"node": "summarise", "user_id": tenant}).json()
    assert (found["sector"], found["namespace"], [i["id"] for i in found["items"]]) == (
        "semantic",
        "default",
        [stored["memory"]["id"]],
    )
