"""Erasing a tenant: every table with a user_id and every Valkey key of the tenant empty after, its open jobs
cancelled first, other tenants (one whose name begins with the erased one's) untouched; a document deleted with
its memories."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest
import redis
from sqlalchemy import text

from shared.api.memories import MemoryCreate
from shared.backpressure import Quota, bucket_key
from shared.data import erasure
from shared.embedding import SyntheticEmbedder
from shared.embedding.cache import CachedEmbedder
from shared.jobs import ChunkSpec
from shared.memory.chunks import store_chunk
from shared.retrieval import stats as retrieval_stats
from shared.retrieval.hot_rows import HotRowCache
from shared.storage import documents as document_store
from shared.storage import erasure as erasure_store
from shared.storage import jobs as job_store
from shared.storage import waypoints as waypoint_store
from tests.conftest import SEALER
from tests.integration.helpers import item, memory_count

pytestmark = pytest.mark.integration


def _fill(app_db, engine, client, tenant: str) -> uuid.UUID:
    """A tenant with rows in every table and keys of every kind; the id of one of its open jobs."""
    with app_db.session(tenant) as s:
        first, _ = engine.add(
            s,
            tenant,
            MemoryCreate(content=f"{tenant} keeps the spare key under the mat", metadata={"session_id": "s1"}),
        )
        second, _ = engine.add(
            s, tenant, MemoryCreate(content=f"{tenant} waters the fern on Fridays", metadata={"session_id": "s1"})
        )
        waypoint_store.create_link(s, tenant, first["id"], second["id"], kind="contradicts", weight=0.4)
        document_id = document_store.insert_document(
            s,
            user_id=tenant,
            source_type="upload",
            source_uri=None,
            filename="notes.txt",
            mime_type=None,
            fmt="text",
            byte_size=5,
            content_hash=f"{tenant}-doc",
            url_hash=None,
            meta={},
        )
        document_store.stage_upload(s, document_id, __import__("io").BytesIO(b"bytes"))
        done_job, _ = job_store.create_job(s, user_id=tenant, kind="batch", total=2, params={}, idempotency_key=None)
        job_store.add_chunks(s, done_job, [ChunkSpec(0, "semantic", [item(f"{tenant} bulk {i}") for i in range(2)])])
        open_job, _ = job_store.create_job(s, user_id=tenant, kind="batch", total=2, params={}, idempotency_key=None)
        job_store.add_chunks(s, open_job, [ChunkSpec(0, "semantic", [item(f"{tenant} later {i}") for i in range(2)])])
    with app_db.session(tenant) as s:
        store_chunk(engine, s, done_job, 0)
    with app_db.session(tenant) as s:  # the embedder's log of a job of the tenant
        s.execute(
            text(
                "INSERT INTO embed_logs (provider, model, status, item_count, latency_ms, job_id) "
                "VALUES ('synthetic', 'x', 'completed', 2, 1.0, :j)"
            ),
            {"j": done_job},
        )
    client.set(bucket_key(Quota.WRITES, tenant), "1")
    HotRowCache(client, ttl_seconds=60, sealer=SEALER).put(
        [{"user_id": tenant, "id": first["id"], "version": 1, "tier": "hot", "compression": "full", "content": "x"}]
    )
    CachedEmbedder(SyntheticEmbedder(dim=8), client, ttl_seconds=60, sealer=SEALER).embed_logged(
        ["where is the key"], tenant=tenant
    )
    retrieval_stats.record_many(client, {(tenant, "injected"): 1}, now=datetime.now(UTC))
    return open_job


def _keys_naming(client, tenant: str) -> list[str]:
    """Every key in Valkey whose name holds the tenant's."""
    return [raw.decode() for raw in client.scan_iter(count=1000) if tenant in raw.decode()]


def test_an_erased_tenant_leaves_nothing_in_any_table_or_key(app_db, maintenance, engine, settings, servers, tenant):
    client = redis.Redis.from_url(servers["redis_url"])
    neighbour = f"n{uuid.uuid4().hex[:12]}"
    open_job = _fill(app_db, engine, client, tenant)
    _fill(app_db, engine, client, neighbour)
    with maintenance.session() as s:
        tables = erasure_store.tenant_tables(s)
        theirs = erasure_store.counts(s, neighbour, tables)
    assert set(tables) >= {
        "memories",
        "memory_vectors",
        "waypoints",
        "documents",
        "jobs",
        "conversation_heads",
        "term_stats",
        "tenant_stats",
    }
    assert _keys_naming(client, tenant)
    with maintenance.session() as s:
        job, created = erasure.start(s, tenant)
        again, created_again = erasure.start(s, tenant)
    assert created and not created_again and again["id"] == job["id"]
    steps = 0
    while erasure.run_step(maintenance, app_db, client, settings, job["id"], budget=60) != "done":
        steps += 1
        assert steps < 10
    with maintenance.session() as s:
        assert erasure_store.counts(s, tenant, tables) == {}
        assert erasure_store.counts(s, neighbour, tables) == theirs
        ended = job_store.get_job(s, job["id"])
        cancelled = job_store.get_job(s, open_job)
        logs = s.execute(
            text("SELECT count(*) FROM embed_logs WHERE job_id IN (SELECT id FROM jobs WHERE user_id = :u)"),
            {"u": neighbour},
        ).scalar_one()
        uploads = s.execute(text("SELECT count(*) FROM document_uploads")).scalar_one()
        mentions = s.execute(
            text("SELECT count(*) FROM jobs WHERE params::text LIKE :t OR result::text LIKE :t"),
            {"t": f'%"{tenant}"%'},
        ).scalar_one()
    assert ended["status"] == "succeeded" and "user_id" not in ended["params"] and mentions == 0
    assert (
        ended["result"]["deleted"]["memories"] == 4 and ended["result"]["deleted"]["embed_logs"] == 2
    )  # its chunk's call, and ours
    assert ended["progress_done"] == ended["progress_total"] > 0
    assert cancelled is None  # cancelled, then deleted with the tenant's other jobs
    assert logs == 2 and uploads >= 1  # the neighbour's
    assert _keys_naming(client, tenant) == []
    assert len(_keys_naming(client, neighbour)) == 4  # bucket, hot row, query embedding, a day of stats
    assert memory_count(app_db, neighbour) == 4


def test_deleting_a_document_deletes_its_memories(app_db, engine, tenant):
    with app_db.session(tenant) as s:
        document_id = document_store.insert_document(
            s,
            user_id=tenant,
            source_type="upload",
            source_uri=None,
            filename="a.txt",
            mime_type=None,
            fmt="text",
            byte_size=1,
            content_hash=f"{tenant}-a",
            url_hash=None,
            meta={},
        )
        job_id, _ = job_store.create_job(s, user_id=tenant, kind="ingest", total=3, params={}, idempotency_key=None)
        document_store.attach_job(s, document_id, job_id)
        document_store.set_status(s, document_id, "embedding", chunk_count=3)
        placed = [
            item(f"{tenant} page {i}", placement={"document_id": document_id, "chunk_index": i}) for i in range(3)
        ]
        job_store.add_chunks(s, job_id, [ChunkSpec(0, "semantic", placed[:2]), ChunkSpec(1, "semantic", placed[2:])])
        engine.add(s, tenant, MemoryCreate(content=f"{tenant} something else entirely"))
    with app_db.session(tenant) as s:
        store_chunk(engine, s, job_id, 0)
    deleted = erasure.delete_document(app_db.bound(tenant), tenant, document_id)
    assert deleted == 2
    with app_db.session(tenant) as s:
        assert document_store.get_document(s, document_id, tenant) is None
        job = job_store.get_job(s, job_id)
        assert store_chunk(engine, s, job_id, 1) is None  # its ingestion was cancelled: the rest is never stored
        stats = s.execute(text("SELECT documents FROM tenant_stats WHERE user_id = :u"), {"u": tenant}).scalar_one()
    assert job["status"] == "cancelled"
    assert memory_count(app_db, tenant) == 1
    assert stats == 1  # the fresh chunk memories were never counted; the add is


def test_redis_keys_of_a_tenant_are_found_by_their_exact_name(servers, tenant):
    client = redis.Redis.from_url(servers["redis_url"])
    longer = f"{tenant}x"
    for name in (tenant, longer):
        client.set(f"{retrieval_stats.KEY_PREFIX}:{name}:20260101", json.dumps({"queries": 1}))
    client.set(f"{retrieval_stats.KEY_PREFIX}:{tenant}:b:20260101", "1")  # tenant "<tenant>:b"'s
    assert erasure.forget_keys(client, tenant) == 1
    assert client.exists(f"{retrieval_stats.KEY_PREFIX}:{longer}:20260101")
    assert client.exists(f"{retrieval_stats.KEY_PREFIX}:{tenant}:b:20260101")
