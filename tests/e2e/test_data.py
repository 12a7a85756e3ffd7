"""The data a tenant owns, over HTTP with real workers: export → erase → import gives back the same tenant and the
same answers; an erasure leaves nothing of the tenant in any table or key and nothing of another touched; a large
batch cancelled halfway ends cancelled with every stored chunk whole and nothing stored after."""

from __future__ import annotations

import base64
import json
import time
import uuid

import pytest
import redis
from sqlalchemy import text

from shared.jobs import ALL_QUEUES, SweepJobs
from shared.queueing import make_celery, send
from shared.storage import erasure as erasure_store
from tests.conftest import wait_for_job
from tests.e2e.filled import answers as _answers
from tests.e2e.filled import export as _export
from tests.e2e.filled import fill as _fill
from tests.e2e.filled import settled as _settled
from tests.e2e.filled import total as _total
from tests.e2e.filled import wait as _wait

pytestmark = pytest.mark.e2e


def test_export_erase_import_gives_back_the_same_memories_and_answers(http, worker, tenant):
    _fill(http, tenant)
    before, stored = _answers(http, tenant), _total(http, tenant)
    exported = _export(http, tenant)
    header, end = exported[0], exported[-1]
    assert header["type"] == "header" and header["user_id"] == tenant and header["version"] == 1
    assert end == {"type": "end", "documents": 1, "memories": stored, "waypoints": end["waypoints"]}
    assert end["waypoints"] >= 5  # 3 next (the conversation), 2 next (the document), the supersedes, best matches
    vectors = [v for line in exported if line["type"] == "memory" for v in line["vectors"]]
    assert vectors and all(len(base64.b64decode(v["data"])) == 4 * v["dim"] for v in vectors)

    erased = http.post("/maintenance/erase", params={"wait": "true"}, json={"user_id": tenant})
    assert erased.status_code == 200 and erased.json()["status"] == "succeeded", erased.text
    assert http.get("/memory/all", params={"user_id": tenant}).json()["total"] == 0
    assert http.post("/memory/query", json={"query": "ferry", "user_id": tenant}).json()["matches"] == []

    body = "".join(json.dumps(line) + "\n" for line in exported).encode()
    imported = http.post(
        "/import", params={"user_id": tenant}, content=body, headers={"content-type": "application/x-ndjson"}
    )
    assert imported.status_code == 202, imported.text
    job = wait_for_job(http, imported.json()["job_id"], tenant)
    assert job["status"] == "succeeded", job
    assert job["result"]["created"] == stored and job["result"]["reembedded"] == 0
    _wait(lambda: _settled(http, tenant))

    again = _export(http, tenant)
    assert again[1:] == exported[1:]  # every document, memory (ids, times, state, vectors) and waypoint as it was
    assert _answers(http, tenant) == before

    twice = http.post(
        "/import", params={"user_id": tenant}, content=body, headers={"content-type": "application/x-ndjson"}
    ).json()
    assert wait_for_job(http, twice["job_id"], tenant)["result"]["created"] == 0  # nothing stored twice
    assert _export(http, tenant)[1:] == exported[1:]


def _rows_of(maintenance, tenant: str) -> dict[str, int]:
    with maintenance.session() as s:
        return erasure_store.counts(s, tenant, erasure_store.tenant_tables(s))


def _drained(client: redis.Redis) -> bool:
    return all(client.llen(queue) == 0 for queue in ALL_QUEUES) and not client.hlen("unacked")


def _mentions(client: redis.Redis, tenant: str) -> list[str]:
    """Keys whose name or value holds the tenant's name."""
    found = []
    for raw in client.scan_iter(count=1000):
        key = raw.decode()
        kind = client.type(raw).decode()
        values: list = []
        if kind == "string":
            values = [client.get(raw)]
        elif kind == "hash":
            values = [*client.hkeys(raw), *client.hvals(raw)]
        elif kind == "list":
            values = client.lrange(raw, 0, -1)
        elif kind in ("set", "zset"):
            values = list(client.smembers(raw)) if kind == "set" else client.zrange(raw, 0, -1)
        if tenant in key or any(tenant.encode() in (v or b"") for v in values):
            found.append(key)
    return found


def test_an_erasure_leaves_nothing_of_the_tenant_and_touches_no_other(http, worker, maintenance, servers, tenant):
    other = f"keep-{uuid.uuid4().hex[:12]}"  # no part of the erased name
    for who in (tenant, other):
        _fill(http, who)
        http.post("/memory/query", json={"query": "ferry to Harwich", "user_id": who})  # cached, counted
    client = redis.Redis.from_url(servers["redis_url"])
    kept = _rows_of(maintenance, other)

    # its cached query embedding and its query counts (rate-limit buckets expire by themselves once full again);
    # the counts are written after the answer, so they are waited for, for both tenants
    def kept_of(who: str) -> list[str]:
        return sorted(k for k in _mentions(client, who) if k.startswith(("mnemoflow:qemb", "mnemoflow:retrieval")))

    _wait(lambda: len(kept_of(tenant)) == 2 and len(kept_of(other)) == 2)
    assert _rows_of(maintenance, tenant)
    kept_keys = kept_of(other)
    assert len(kept_keys) == 2

    erased = http.post("/maintenance/erase", params={"wait": "true", "timeout": 120}, json={"user_id": tenant})
    assert erased.status_code == 200 and erased.json()["status"] == "succeeded", erased.text
    deleted = erased.json()["result"]["deleted"]
    assert deleted["memories"] == _total(http, other) and deleted["documents"] == 1 and deleted["jobs"] >= 2

    assert _rows_of(maintenance, tenant) == {}  # every table with a user_id
    with maintenance.session() as s:  # and the rows that name the tenant's rows, not the tenant
        orphans = {
            table: s.execute(text(sql)).scalar_one()
            for table, sql in {
                "job_chunks": "SELECT count(*) FROM job_chunks c "
                "WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = c.job_id)",
                "document_uploads": "SELECT count(*) FROM document_uploads u "
                "WHERE NOT EXISTS (SELECT 1 FROM documents d WHERE d.id = u.document_id)",
                "embed_logs": "SELECT count(*) FROM embed_logs l WHERE l.job_id IS NOT NULL "
                "AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = l.job_id)",
                "erase job naming it": f"SELECT count(*) FROM jobs WHERE params::text LIKE '%{tenant}%'",
            }.items()
        }
    assert orphans == {"job_chunks": 0, "document_uploads": 0, "embed_logs": 0, "erase job naming it": 0}
    _wait(lambda: _drained(client))  # queued messages for its work are consumed (finding nothing)
    assert _mentions(client, tenant) == []
    assert _rows_of(maintenance, other) == kept
    assert all(client.exists(key) for key in kept_keys)
    assert _total(http, other) == deleted["memories"]


def _memories_without_all_vectors(maintenance, tenant: str) -> int:
    with maintenance.session() as s:
        return s.execute(
            text(
                "SELECT count(*) FROM memories m WHERE m.user_id = :u AND "
                "(SELECT count(*) FROM memory_vectors v WHERE v.memory_id = m.id) <> cardinality(m.sectors)"
            ),
            {"u": tenant},
        ).scalar_one()


def _stored(maintenance, tenant: str) -> int:
    with maintenance.session() as s:
        return s.execute(text("SELECT count(*) FROM memories WHERE user_id = :u"), {"u": tenant}).scalar_one()


def test_a_large_batch_cancelled_halfway_ends_cancelled_with_whole_chunks(http, worker, maintenance, settings, tenant):
    items = [
        {"content": f"Ledger line {i}: crate {i % 97} moved to bay {i % 13} on day {i % 31}"} for i in range(20000)
    ]
    accepted = http.post("/memory/batch", json={"items": items, "user_id": tenant}).json()
    job_id = accepted["job_id"]
    _wait(lambda: http.get(f"/jobs/{job_id}", params={"user_id": tenant}).json()["progress"]["done"] > 0, interval=0.05)
    cancelled = http.post(f"/jobs/{job_id}/cancel", params={"user_id": tenant})
    assert cancelled.status_code == 200, cancelled.text
    job = cancelled.json()
    assert job["status"] == "cancelled" and 0 < job["progress"]["done"] < job["progress"]["total"] == 20000
    stored_at_answer = _stored(maintenance, tenant)
    assert stored_at_answer == job["progress"]["done"]  # the answer's progress is what is stored, whole chunks

    with maintenance.session() as s:  # every chunk looks lost to the sweeper now: it must still send none of them
        s.execute(
            text("UPDATE job_chunks SET enqueued_at = now() - interval '1 hour' WHERE job_id = :j"), {"j": job_id}
        )
    app = make_celery(settings, "tests.sweep")
    send(app, SweepJobs())
    client = redis.Redis.from_url(settings.redis_url)
    _wait(lambda: _drained(client))  # the late messages and the sweep, consumed
    time.sleep(1)
    assert _stored(maintenance, tenant) == stored_at_answer
    assert _memories_without_all_vectors(maintenance, tenant) == 0
    with maintenance.session() as s:
        chunks = s.execute(
            text("SELECT status, count(*), sum(item_count) FROM job_chunks WHERE job_id = :j GROUP BY status"),
            {"j": job_id},
        ).all()
        created = job_store_totals(s, job_id)
    by_status = {status: (int(n), int(items_)) for status, n, items_ in chunks}
    assert set(by_status) <= {"done", "cancelled"} and by_status.get("cancelled")
    assert by_status["done"][1] == job["progress"]["done"] == created
    after = http.get(f"/jobs/{job_id}", params={"user_id": tenant}).json()
    assert after["status"] == "cancelled" and after["progress"] == job["progress"]
    again = http.post(f"/jobs/{job_id}/cancel", params={"user_id": tenant})
    assert again.status_code == 409 and "already ended (cancelled)" in again.json()["error"]["message"]


def job_store_totals(session, job_id) -> int:
    from shared.storage import jobs as job_store

    totals = job_store.chunk_totals(session, job_id)
    return totals.get("created", 0) + totals.get("duplicates", 0)
