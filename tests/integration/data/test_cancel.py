"""Cancelling a job: the job's row orders the cancel against chunks being stored; a chunk is stored whole or not
at all, nothing is stored after the cancel returns, and the sweeper re-sends nothing of a cancelled job."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import text

from shared.data.cancel import cancel_job
from shared.errors import Conflict, NotFound
from shared.jobs import ChunkSpec
from shared.memory.chunks import store_chunk
from shared.model.statuses import JobStatus
from shared.storage import cancels, leases
from shared.storage import jobs as job_store
from tests.integration.helpers import item, memory_count

pytestmark = pytest.mark.integration


def _job(db, tenant, chunks: int, per_chunk: int = 5, kind: str = "batch"):
    with db.session() as s:
        job_id, _ = job_store.create_job(
            s, user_id=tenant, kind=kind, total=chunks * per_chunk, params={}, idempotency_key=None
        )
        job_store.add_chunks(
            s,
            job_id,
            [
                ChunkSpec(
                    c, "semantic", [item(f"cancel test chunk {c} fact {i} about tides") for i in range(per_chunk)]
                )
                for c in range(chunks)
            ],
        )
    return job_id


def _chunk_statuses(db, job_id):
    with db.session() as s:
        rows = s.execute(text("SELECT seq, status FROM job_chunks WHERE job_id = :j ORDER BY seq"), {"j": job_id})
        return [r.status for r in rows]


def test_a_cancelled_job_stores_none_of_its_remaining_chunks(db, engine, tenant):
    job_id = _job(db, tenant, chunks=3)
    with db.session() as s:
        assert store_chunk(engine, s, job_id, 0) == "running"
    job = cancel_job(db, job_id, tenant)
    assert job["status"] == "cancelled" and job["progress_done"] == 5 and job["cancelled_chunks"] == 2
    for seq in (1, 2):  # their messages arrive after the cancel
        with db.session() as s:
            assert store_chunk(engine, s, job_id, seq) is None  # cancelled: not pending any more
    assert memory_count(db, tenant) == 5
    assert _chunk_statuses(db, job_id) == ["done", "cancelled", "cancelled"]
    with db.session() as s:
        after = job_store.get_job(s, job_id)
    assert after["status"] == "cancelled" and after["progress_done"] == 5 and after["finished_at"] is not None


def test_a_chunk_in_its_transaction_when_the_cancel_lands_rolls_back_whole(db, engine, tenant):
    job_id = _job(db, tenant, chunks=2)
    with db.session() as worker:  # the worker has claimed its chunk and stored its memories, not yet its progress
        assert job_store.lock_chunk(worker, job_id, 0) is not None
        prepared, _ = engine.prepare([_create(f"in flight {i}") for i in range(4)], tenant)
        engine.store(worker, prepared, settle=False)
        cancelled = cancel_job(db, job_id, tenant)  # another connection: the chunk's row is held, so skipped
        assert cancelled["cancelled_chunks"] == 1
        assert job_store.complete_chunk(worker, job_id, 0, done=4, result={}) == JobStatus.CANCELLED
        worker.rollback()
    assert memory_count(db, tenant) == 0
    with db.session() as s:
        assert store_chunk(engine, s, job_id, 0) == JobStatus.CANCELLED  # its message, redelivered: it closes it
    assert _chunk_statuses(db, job_id) == ["cancelled", "cancelled"]


def test_a_cancel_waits_for_a_chunk_that_got_to_the_job_first_and_counts_it(db, engine, tenant):
    job_id = _job(db, tenant, chunks=2)
    answer: dict = {}
    with db.session() as worker:
        assert job_store.lock_chunk(worker, job_id, 0) is not None
        prepared, _ = engine.prepare([_create(f"first in {i}") for i in range(3)], tenant)
        engine.store(worker, prepared, settle=False)
        assert job_store.complete_chunk(worker, job_id, 0, done=3, result={}) == "running"  # holds the job row
        thread = threading.Thread(target=lambda: answer.update(cancel_job(db, job_id, tenant)))
        thread.start()
        time.sleep(0.5)
        assert thread.is_alive() and not answer  # waiting for the chunk's commit, not skipping it
    thread.join(10)
    assert answer["status"] == "cancelled" and answer["progress_done"] == 3  # what was stored, counted
    assert memory_count(db, tenant) == 3


def test_cancel_of_a_finished_or_unknown_job_is_refused(db, engine, tenant):
    job_id = _job(db, tenant, chunks=1)
    with db.session() as s:
        assert store_chunk(engine, s, job_id, 0) == "succeeded"
    with pytest.raises(Conflict, match="already ended \\(succeeded\\)"):
        cancel_job(db, job_id, tenant)
    with pytest.raises(NotFound):
        cancel_job(db, job_id, f"{tenant}-other")
    other = _job(db, tenant, chunks=1)
    cancel_job(db, other, tenant)
    with pytest.raises(Conflict, match="already ended \\(cancelled\\)"):
        cancel_job(db, other, tenant)


def test_the_sweeper_resends_nothing_of_a_cancelled_job_and_closes_what_a_dead_worker_left(db, maintenance, tenant):
    job_id = _job(db, tenant, chunks=2)
    with db.session() as s:  # chunk 0 claimed by a worker that then died (its lease runs out)
        leases.claim_chunk(s, job_id, 0, owner="dead-worker", ttl=2)
        s.execute(
            text("UPDATE job_chunks SET enqueued_at = now() - interval '1 hour' WHERE job_id = :j"), {"j": job_id}
        )
    with db.session() as worker:  # the worker holds chunk 0's row while the cancel lands (it is skipped)...
        assert job_store.lock_chunk(worker, job_id, 0, "dead-worker") is not None
        assert cancel_job(db, job_id, tenant)["cancelled_chunks"] == 1
        worker.rollback()  # ...and dies before it looks at its job again: chunk 0 stays pending
    time.sleep(2.5)  # the dead worker's lease runs out
    with maintenance.session() as s:
        stalled = [c for c in leases.stalled_chunks(s, older_than_seconds=1) if c.job_id == job_id]
        closed = cancels.close_cancelled_chunks(s)
    assert stalled == [] and closed >= 1
    assert _chunk_statuses(db, job_id) == ["cancelled", "cancelled"]


def _create(content: str):
    from shared.api.memories import MemoryCreate

    return MemoryCreate(content=content)


def test_a_document_cancelled_while_it_is_extracted_ends_cancelled_with_nothing_planned(db, settings, tenant):
    from shared.ingest import intake
    from shared.ingest.pipeline import run_ingest
    from tests.integration.helpers import trickling, wait_until

    local = settings.model_copy(update={"ingest_allow_private_urls": True})  # the slow page is on loopback
    with trickling(seconds=6) as site:
        with db.session() as s:
            accepted = intake.accept_url(s, user_id=tenant, url=f"{site}/minutes", params={})
        job_id = accepted.job_id
        outcome: dict = {}
        worker = threading.Thread(target=lambda: outcome.update(result=run_ingest(db, local, job_id)))
        worker.start()
        wait_until(lambda: _document(db, job_id)["status"] == "extracting", timeout=30)
        job = cancel_job(db, job_id, tenant)
        assert job["status"] == "cancelled" and _document(db, job_id)["status"] == "cancelled"
        worker.join(60)
    assert outcome["result"].status == "skipped" and outcome["result"].chunks == []  # extracted, planned nothing
    with db.session() as s:
        chunks = s.execute(text("SELECT count(*) FROM job_chunks WHERE job_id = :j"), {"j": job_id}).scalar_one()
        assert job_store.get_job(s, job_id)["status"] == "cancelled"
    assert chunks == 0 and _document(db, job_id)["status"] == "cancelled" and memory_count(db, tenant) == 0
    assert run_ingest(db, local, job_id).status == "cancelled"  # a redelivered step: nothing
    with db.session() as s:  # the same URL again starts it afresh
        again = intake.accept_url(s, user_id=tenant, url=f"{site}/minutes", params={})
    assert again.status == "retried" and again.document_id == accepted.document_id


def _document(db, job_id):
    from shared.storage import documents as document_store

    with db.session() as s:
        return document_store.document_of_job(s, job_id)
