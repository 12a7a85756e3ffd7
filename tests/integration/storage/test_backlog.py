"""A tenant's open work, counted for its messages' priority (shared/storage/backlog.py): its pending chunks' model
windows and its documents waiting to be parsed, no one else's, nothing finished; and the priority a chunk is kept
at, which the sweeper re-sends it with."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text

from shared.backpressure import DOCUMENT_WINDOWS, HIGHEST, LOWEST
from shared.jobs import ChunkSpec, JobKind, StoreChunk, chunk_message
from shared.storage import backlog, leases
from shared.storage import jobs as job_store

pytestmark = pytest.mark.integration

SECTION = {"content": "word " * 1600}  # 2,000 estimated tokens: 8 windows


def _job(db, tenant: str, chunks: int, *, kind: str = "batch", priority: int | None = None) -> uuid.UUID:
    with db.session(tenant) as s:
        job_id, _ = job_store.create_job(s, user_id=tenant, kind=kind, total=chunks, params={}, idempotency_key=None)
        specs = [ChunkSpec(seq, "semantic", [SECTION, SECTION]) for seq in range(chunks)]  # 16 windows each
        job_store.add_chunks(s, job_id, specs, priority=priority)
    return job_id


def _windows(db, tenant: str, **kw) -> int:
    with db.session(tenant) as s:
        return backlog.open_windows(s, tenant, **kw)


def test_a_tenants_open_work_is_its_pending_chunks_and_waiting_documents(db, tenant):
    other = f"{tenant}-other"
    assert _windows(db, tenant) == 0
    job_id = _job(db, tenant, 3)
    _job(db, other, 5)  # another tenant's backlog is not this one's
    assert _windows(db, tenant) == 3 * 16
    with db.session(tenant) as s:
        job_store.create_job(s, user_id=tenant, kind=JobKind.INGEST, total=0, params={}, idempotency_key=None)
        job_store.complete_chunk(s, job_id, 0, done=2, result={})
    assert _windows(db, tenant) == 2 * 16 + DOCUMENT_WINDOWS  # a stored chunk no longer counts; a document does
    assert _windows(db, tenant, at_most=1) <= 16 + DOCUMENT_WINDOWS  # counting stops early
    with db.session(tenant) as s:
        assert backlog.priority_of(s, tenant, 0, fair=True) == 2  # 40 windows: 33-64
        assert backlog.priority_of(s, tenant, 0, fair=False) is None
        assert backlog.priority_of(s, f"{tenant}-quiet", 10, fair=True) == HIGHEST


def test_a_chunk_written_before_costs_were_kept_counts_its_items(db, tenant):
    job_id = _job(db, tenant, 1)
    with db.session(tenant) as s:
        s.execute(text("UPDATE job_chunks SET cost = 0 WHERE job_id = :j"), {"j": job_id})
    assert _windows(db, tenant) == 2


def test_the_sweeper_re_sends_a_stalled_chunk_at_the_priority_it_was_sent_at(db, tenant):
    job_id = _job(db, tenant, 1, priority=LOWEST - 2)
    with db.session() as s:
        s.execute(
            text("UPDATE job_chunks SET enqueued_at = now() - interval '1 hour' WHERE job_id = :j"), {"j": job_id}
        )
    with db.session() as s:
        (ref,) = [r for r in leases.stalled_chunks(s, older_than_seconds=300) if r.job_id == job_id]
        s.rollback()
    message = chunk_message(ref.kind, ref.job_id, ref.seq, ref.sector, ref.user_id, ref.priority)
    assert message == StoreChunk(job_id=job_id, seq=0, sector="semantic", user_id=tenant, priority=LOWEST - 2)
    assert message.priority == LOWEST - 2
