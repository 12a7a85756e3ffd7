"""POST /import answers what becomes of each line, against the real gateway and worker: which lines it skips and
why, which it stores under another id; an id another tenant holds and a fresh id are answered alike (an import
cannot tell which ids the store holds); and one import runs per tenant at a time (409 with Retry-After).

Before, a line whose id another tenant held was stored under a new id and a fresh one under its own (so an
importer could tell the id existed), and a line whose id the tenant held with other content was dropped silently."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from sqlalchemy import text

from shared.jobs import JobKind
from shared.storage import jobs as job_store
from tests.conftest import wait_for_job

pytestmark = pytest.mark.e2e

NDJSON = {"content-type": "application/x-ndjson"}
NOW = "2026-01-01T00:00:00+00:00"


def _memory(content: str, memory_id: str | None = None) -> dict[str, Any]:
    return {
        "type": "memory", "id": memory_id or str(uuid.uuid4()), "content": content, "primary_sector": "semantic",
        "sectors": ["semantic"], "salience": 0.5, "decay_lambda": 0.01, "created_at": NOW, "updated_at": NOW,
        "last_seen_at": NOW,
    }  # fmt: skip


def _file(user_id: str, memories: list[dict[str, Any]]) -> bytes:
    header = {
        "type": "header", "format": "mnemoflow-export", "version": 1, "user_id": user_id, "exported_at": NOW,
        "mnemoflow": "0", "vectors": False,
    }  # fmt: skip
    end = {"type": "end", "documents": 0, "memories": len(memories), "waypoints": 0}
    return "".join(json.dumps(line) + "\n" for line in [header, *memories, end]).encode()


def test_an_import_under_a_tenants_key_answers_each_line_and_hides_other_tenants_ids(alice, bob, worker, keys):
    tag = uuid.uuid4().hex[:8]
    bobs = bob.post("/memory/add", json={"content": f"bob's diary {tag}"}).json()
    kept = alice.post("/memory/add", json={"content": f"alice's boathouse key is blue {tag}"}).json()
    edited = alice.post("/memory/add", json={"content": f"alice's ferry leaves at nine {tag}"}).json()
    lines = [
        _memory(f"alice's copy over bob's id {tag}", bobs["id"]),  # line 2: an id another tenant holds
        _memory(f"alice's fresh note {tag}"),  # line 3: an id nobody holds
        _memory(f"alice's ferry leaves at ten {tag}", edited["id"]),  # line 4: her id, other content
        _memory(kept["content"], kept["id"]),  # line 5: her id, the same content
        _memory(kept["content"]),  # line 6: her content, another id
        _memory(f"alice's fresh note {tag}"),  # line 7: the same content as line 3
    ]
    imported = alice.post("/import", content=_file(keys.tenant_a, lines), headers=NDJSON)
    assert imported.status_code == 202, imported.text
    answer = imported.json()
    assert bobs["id"] not in imported.text and lines[1]["id"] not in imported.text  # the file's ids are not echoed
    assert answer["lines"] == 8 and answer["stored"] == 2 and answer["memories"] == 6
    rekeyed = {r["line"]: r for r in answer["rekeyed"]}
    assert sorted(rekeyed) == [2, 3] and answer["rekeyed_lines"] == 2
    assert rekeyed[2]["why"] == rekeyed[3]["why"]  # another tenant's id and a fresh one: the same answer
    assert "an import keeps a line's id only where the tenant holds it" in rekeyed[2]["why"]
    skipped = {s["line"]: s["why"] for s in answer["skipped"]}
    assert sorted(skipped) == [4, 5, 6, 7] and answer["skipped_lines"] == 4
    assert skipped[4] == f"memory {edited['id']} is stored with other content (changed since the export): it was kept"
    assert skipped[5] == f"memory {kept['id']} is stored already (imported before)"
    assert skipped[6] == f"the same content is stored already, as memory {kept['id']}"
    assert skipped[7] == "the same content as line 3"

    job = wait_for_job(alice, answer["job_id"], keys.tenant_a)
    assert job["status"] == "succeeded" and job["result"]["created"] == 2, job
    for line in (2, 3):  # stored where the answer said
        stored = alice.get(f"/memory/{rekeyed[line]['id']}").json()
        assert stored["content"] == lines[line - 2]["content"], stored
    assert alice.get(f"/memory/{lines[1]['id']}").status_code == 404  # not under the file's fresh id either
    assert alice.get(f"/memory/{edited['id']}").json()["content"] == edited["content"]
    assert bob.get(f"/memory/{bobs['id']}").json()["content"] == bobs["content"]

    again = alice.post("/import", content=_file(keys.tenant_a, lines), headers=NDJSON).json()
    assert again["stored"] == 0 and again["rekeyed"] == [] and again["skipped_lines"] == 6
    assert {s["line"]: s["why"] for s in again["skipped"]}[3] == (
        f"memory {rekeyed[3]['id']} is stored already (imported before)"
    )
    assert wait_for_job(alice, again["job_id"], keys.tenant_a)["result"]["created"] == 0


def test_an_import_under_the_operator_key_keeps_free_ids(http, worker, tenant):
    line = _memory(f"a note restored by the operator {uuid.uuid4().hex[:8]}")
    answer = http.post("/import", params={"user_id": tenant}, content=_file(tenant, [line]), headers=NDJSON).json()
    assert answer["stored"] == 1 and answer["rekeyed"] == [] and answer["skipped"] == [], answer
    wait_for_job(http, answer["job_id"], tenant)
    assert http.get(f"/memory/{line['id']}", params={"user_id": tenant}).json()["content"] == line["content"]


def test_a_second_import_while_one_runs_is_a_409_with_retry_after(http, maintenance, tenant):
    # A job the tenant's first import made and no worker has ended yet (no worker runs in this test)
    with maintenance.session() as session:
        running, _ = job_store.create_job(
            session, user_id=tenant, kind=JobKind.IMPORT, total=1, params={}, idempotency_key=None
        )
    body = _file(tenant, [_memory("a note imported second")])
    refused = http.post("/import", params={"user_id": tenant}, content=body, headers=NDJSON)
    assert refused.status_code == 409 and refused.headers["retry-after"] == "10", refused.text
    error = refused.json()["error"]
    assert error["code"] == "conflict" and f"still running (job {running})" in error["message"], error
    assert "one import runs per tenant at a time" in error["message"]
    other = f"{tenant}-other"  # another tenant is not held up
    answered = http.post("/import", params={"user_id": other}, content=_file(other, []), headers=NDJSON)
    assert answered.status_code == 200, answered.text

    assert http.post(f"/jobs/{running}/cancel", params={"user_id": tenant}).status_code == 200
    accepted = http.post("/import", params={"user_id": tenant}, content=body, headers=NDJSON)
    assert accepted.status_code == 202, accepted.text


def test_an_import_sent_while_another_is_being_read_is_a_409(http, maintenance, tenant):
    body = _file(tenant, [_memory("a note imported while another is read")])
    with maintenance.session() as session:  # as the planning transaction of a first import holds it
        session.execute(text("SELECT pg_advisory_xact_lock(727280, hashtext(:t))"), {"t": tenant})
        refused = http.post("/import", params={"user_id": tenant}, content=body, headers=NDJSON)
    assert refused.status_code == 409 and refused.headers["retry-after"] == "10", refused.text
    assert "is being read now" in refused.json()["error"]["message"]
    with maintenance.session() as session:
        jobs = session.execute(text("SELECT count(*) FROM jobs WHERE user_id = :u"), {"u": tenant}).scalar()
    assert jobs == 0  # refused whole: no job, nothing stored


def _document(document_id: str, content_hash: str) -> dict[str, Any]:
    return {
        "type": "document", "id": document_id, "source_type": "upload", "filename": "notes.txt",
        "content_hash": content_hash, "status": "done", "created_at": NOW, "updated_at": NOW,
    }  # fmt: skip


def test_document_lines_with_another_tenants_id_and_a_fresh_id_are_answered_alike(alice, bob, keys):
    theirs = bob.post("/memory/ingest", json={"content_type": "txt", "data": f"bob's notes {uuid.uuid4()}"}).json()
    documents = [_document(theirs["document_id"], uuid.uuid4().hex), _document(str(uuid.uuid4()), uuid.uuid4().hex)]
    header = {
        "type": "header", "format": "mnemoflow-export", "version": 1, "user_id": keys.tenant_a, "exported_at": NOW,
        "mnemoflow": "0", "vectors": False,
    }  # fmt: skip
    end = {"type": "end", "documents": 2, "memories": 0, "waypoints": 0}
    body = "".join(json.dumps(line) + "\n" for line in [header, *documents, end]).encode()
    imported = alice.post("/import", content=body, headers=NDJSON)
    assert imported.status_code == 200, imported.text  # documents only: stored at once
    answer = imported.json()
    assert theirs["document_id"] not in imported.text and documents[1]["id"] not in imported.text
    rekeyed = {r["line"]: r for r in answer["rekeyed"]}
    assert sorted(rekeyed) == [2, 3] and rekeyed[2]["why"] == rekeyed[3]["why"] and answer["stored"] == 2
    for line in (2, 3):
        assert alice.get(f"/documents/{rekeyed[line]['id']}").status_code == 200
    assert alice.get(f"/documents/{documents[1]['id']}").status_code == 404
    assert bob.get(f"/documents/{theirs['document_id']}").json()["filename"] != "notes.txt"
