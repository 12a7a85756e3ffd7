"""The ingest worker under redelivery and loss: one document, one plan, one memory per chunk, whatever happens."""

from __future__ import annotations

import hashlib
import io
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import text

from shared.ingest import intake, sniff
from shared.jobs import IngestDocument, SweepJobs
from shared.queueing import make_celery, send
from shared.storage import jobs as job_store
from tests.unit.ingest import samples

pytestmark = pytest.mark.integration


def staged(db, tenant: str, path: Path, chunk_size: int = 64) -> intake.Accepted:
    """A document accepted as the gateway does it, but not enqueued (the test sends the messages)."""
    data = path.read_bytes()
    with db.session(tenant) as s:
        return intake.accept_upload(
            s,
            user_id=tenant,
            source=io.BytesIO(data),
            digest=hashlib.sha256(data).hexdigest(),
            size=len(data),
            fmt=sniff(data),
            filename=path.name,
            declared_type=None,
            # Chunks of distinct text: identical chunks (a repeated footer) would be one memory, by design.
            params={"config": {"chunk_size": chunk_size, "chunk_overlap": 8}},
        )


def wait_job(db, job_id: uuid.UUID, timeout: float = 90.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with db.session() as s:
            job = job_store.get_job(s, job_id)
        assert job is not None
        if job["status"] in ("succeeded", "failed"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not end: {job}")


def facts(db, document_id: uuid.UUID, job_id: uuid.UUID) -> dict:
    with db.session() as s:

        def one(sql: str) -> int:
            return int(s.execute(text(sql), {"d": document_id, "j": job_id}).scalar_one())

        return {
            "status": s.execute(text("SELECT status FROM documents WHERE id = :d"), {"d": document_id}).scalar_one(),
            "chunk_count": one("SELECT chunk_count FROM documents WHERE id = :d"),
            "job_chunks": one("SELECT count(*) FROM job_chunks WHERE job_id = :j"),
            "items": one("SELECT coalesce(sum(item_count), 0) FROM job_chunks WHERE job_id = :j"),
            "memories": one("SELECT count(*) FROM memories WHERE document_id = :d"),
            "distinct_chunks": one("SELECT count(DISTINCT chunk_index) FROM memories WHERE document_id = :d"),
            "next_links": one(
                "SELECT count(*) FROM waypoints w JOIN memories m ON m.id = w.src_id "
                "WHERE w.kind = 'next' AND m.document_id = :d"
            ),
            "staged_parts": one("SELECT count(*) FROM document_uploads WHERE document_id = :d"),
        }


def assert_complete_once(found: dict) -> None:
    n = found["chunk_count"]
    assert found["status"] == "done" and n >= 3
    assert found["items"] == found["memories"] == found["distinct_chunks"] == n
    assert found["next_links"] == n - 1 and found["staged_parts"] == 0


@pytest.fixture
def celery_app(settings):
    app = make_celery(settings, "tests.ingest")
    yield app
    app.close()


def test_redelivered_ingest_messages_plan_and_store_the_document_once(db, worker, celery_app, tenant, tmp_path):
    accepted = staged(db, tenant, samples.docx_file(tmp_path / "report.docx", sections=4))
    assert accepted.job_id is not None
    for _ in range(3):  # the same message three times, two of them at once (the worker runs two processes)
        send(celery_app, IngestDocument(job_id=accepted.job_id, user_id=tenant))
    job = wait_job(db, accepted.job_id)
    assert job["status"] == "succeeded", job
    first = facts(db, accepted.document_id, accepted.job_id)
    assert_complete_once(first)
    send(celery_app, IngestDocument(job_id=accepted.job_id, user_id=tenant))  # long after
    time.sleep(1.0)
    assert facts(db, accepted.document_id, accepted.job_id) == first


def test_a_worker_lost_mid_extraction_is_restarted_cleanly_by_the_sweeper(db, worker, celery_app, tenant, tmp_path):
    accepted = staged(db, tenant, samples.pdf(tmp_path / "long.pdf", pages=5, paragraphs_per_page=2), 100)
    with db.session() as s:  # its worker died while parsing, long ago; the message went with it
        s.execute(text("UPDATE documents SET status = 'extracting' WHERE id = :d"), {"d": accepted.document_id})
        s.execute(
            text(
                "UPDATE jobs SET status = 'running', attempts = 1, updated_at = now() - interval '3 hours' "
                "WHERE id = :j"
            ),
            {"j": accepted.job_id},
        )
    send(celery_app, SweepJobs())
    job = wait_job(db, accepted.job_id)
    assert job["status"] == "succeeded" and job["attempts"] == 2, job
    assert_complete_once(facts(db, accepted.document_id, accepted.job_id))


def test_a_lost_final_step_is_finished_once_by_the_sweeper(db, worker, celery_app, tenant, tmp_path):
    accepted = staged(db, tenant, samples.pdf(tmp_path / "short.pdf", pages=3, paragraphs_per_page=2), 100)
    send(celery_app, IngestDocument(job_id=accepted.job_id, user_id=tenant))
    assert wait_job(db, accepted.job_id)["status"] == "succeeded"
    done = facts(db, accepted.document_id, accepted.job_id)
    with db.session() as s:  # as if the chunk that completed the job had committed without finishing it
        s.execute(text("UPDATE documents SET status = 'embedding' WHERE id = :d"), {"d": accepted.document_id})
        s.execute(
            text(
                "UPDATE jobs SET status = 'running', finished_at = NULL, updated_at = now() - interval '1 hour' "
                "WHERE id = :j"
            ),
            {"j": accepted.job_id},
        )
        s.execute(
            text("DELETE FROM waypoints w USING memories m WHERE m.id = w.src_id AND m.document_id = :d"),
            {"d": accepted.document_id},
        )
    send(celery_app, SweepJobs())
    assert wait_job(db, accepted.job_id)["status"] == "succeeded"
    assert facts(db, accepted.document_id, accepted.job_id) == done
