"""The data routes with keys on: a tenant exports only itself; a file naming another tenant's memory ids, imported
under a tenant's key, writes nothing over them (the importer's memories get ids of their own); a tenant cannot
cancel another's job nor erase anyone; the operator erases one tenant and no other."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.conftest import wait_for_job

pytestmark = pytest.mark.e2e


def _lines(response) -> list[dict]:
    return [json.loads(line) for line in response.text.splitlines()]


def test_a_file_with_another_tenants_ids_writes_nothing_over_them(alice, bob, operator, worker, keys):
    secret = f"bob's diary {uuid.uuid4().hex}"
    kept = bob.post("/memory/add", json={"content": secret}).json()
    exported = _lines(bob.get("/export"))
    assert exported[0]["user_id"] == keys.tenant_b and any(line.get("id") == kept["id"] for line in exported)
    assert alice.get("/export", params={"user_id": keys.tenant_b}).status_code == 403
    assert secret not in alice.get("/export").text

    forged = [dict(line) for line in exported if line["type"] in ("header", "end")]
    forged.insert(1, next(line for line in exported if line.get("id") == kept["id"]) | {"content": "alice's now"})
    forged[-1] = {"type": "end", "documents": 0, "memories": 1, "waypoints": 0}
    body = "".join(json.dumps(line) + "\n" for line in forged).encode()
    imported = alice.post("/import", content=body, headers={"content-type": "application/x-ndjson"})
    assert imported.status_code == 202, imported.text
    job = wait_for_job(alice, imported.json()["job_id"], keys.tenant_a)
    assert job["status"] == "succeeded" and job["result"]["created"] == 1
    mine = alice.get("/memory/all").json()["items"]
    theirs = bob.get(f"/memory/{kept['id']}").json()
    assert theirs["content"] == secret and theirs["user_id"] == keys.tenant_b  # untouched
    copy = next(m for m in mine if m["content"] == "alice's now")
    assert copy["id"] != kept["id"] and copy["user_id"] == keys.tenant_a  # stored under an id of its own


def test_a_tenant_cancels_only_its_own_jobs_and_erases_nobody(alice, bob, worker, keys):
    job = bob.post("/memory/batch", json={"items": [{"content": f"bob batch {uuid.uuid4().hex}"}]}).json()
    assert alice.post(f"/jobs/{job['job_id']}/cancel").status_code == 404
    assert alice.post(f"/jobs/{job['job_id']}/cancel", params={"user_id": keys.tenant_b}).status_code == 403
    refused = alice.post("/maintenance/erase", json={"user_id": keys.tenant_a})
    assert refused.status_code == 403 and "MNEMOFLOW_ADMIN_API_KEY" in refused.json()["error"]["message"]
    # Bob's batch ran to its end, uncancelled; and it lands here, not in the next test's count of bob's memories
    assert wait_for_job(bob, job["job_id"], keys.tenant_b)["status"] == "succeeded"


def test_the_operator_erases_one_tenant_and_no_other(operator, bob, worker, keys):
    victim = f"gone-{uuid.uuid4().hex[:8]}"
    added = operator.post("/memory/add", json={"content": "the operator's note", "user_id": victim}).json()
    assert added["user_id"] == victim
    before = bob.get("/memory/all").json()["total"]
    erased = operator.post(  # the client waits as long as it asks the server to (its default is 30 s)
        "/maintenance/erase", params={"wait": "true", "timeout": 120}, json={"user_id": victim}, timeout=150
    )
    assert erased.status_code == 200 and erased.json()["status"] == "succeeded", erased.text
    assert operator.get("/memory/all", params={"user_id": victim}).json()["total"] == 0
    assert bob.get("/memory/all").json()["total"] == before
