"""A document survives its worker killed outright (kill -9 of the whole process group: main, pool and parser)
mid-extraction: the lease the dead worker's heartbeat no longer renews runs out, the sweeper re-sends the ingest
job, a fresh worker extracts it again, and every chunk is stored once, with its vectors once.

Two documents: a long PDF (hundreds of pages) and a recording, killed mid-transcription (real speech from eSpeak NG,
transcribed by the Whisper model the project ships); the lease, heartbeat and sweeper are the same for both."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid

import psutil
import pytest
import redis
from sqlalchemy import text

from shared.api.common import SECTORS
from shared.ingest.intake import Accepted
from shared.jobs import IngestDocument, Queue, embed_queue
from shared.queueing import make_celery, send
from tests.conftest import running, service_env, wait_for_worker, worker_args
from tests.integration.helpers import job_state, sweeping, wait_until
from tests.integration.ingest.test_pipeline import assert_complete_once, facts, staged
from tests.unit.ingest import samples

pytestmark = pytest.mark.integration

# Pages of three paragraphs, cheap enough for CI (generating them costs more than parsing them). The kill lands
# mid-extraction whatever the size: within 20 ms of the claim, before the parser has answered. The check on attempts
# sees a heartbeat that does not renew only when the second extraction outlasts the 3 s lease, as it does when the
# fresh worker's parser forkserver is still starting (10-20 s on a loaded 2-core machine); on an idle one the parse
# takes under a second and that check proves nothing (tests/integration/storage/test_leases.py covers the renewal).
PAGES = 1500 if os.environ.get("MNEMOFLOW_TEST_FULL") else 600
QUEUES = (Queue.INGEST, Queue.SWEEP, *(embed_queue(sector) for sector in SECTORS))


def long_document(db, tenant: str, tmp_path, label: str, pages: int = PAGES) -> Accepted:
    path = samples.pdf(tmp_path / "long.pdf", pages=pages, paragraphs_per_page=3, label=label)
    accepted = staged(db, tenant, path, chunk_size=400)
    assert accepted.job_id is not None
    return accepted


def recording(db, tenant: str, tmp_path) -> Accepted:
    """About half a minute of speech, in chunks of a few sentences."""
    accepted = staged(db, tenant, samples.speech_wav(tmp_path / "talk.wav", text=samples.TALK), chunk_size=32)
    assert accepted.job_id is not None
    return accepted


def extracting(db, accepted: Accepted) -> dict:
    """Wait until a worker has claimed the document (an attempt counted) and is extracting it."""

    def claimed() -> dict | None:
        job = job_state(db, accepted.job_id)
        return job if job["attempts"] >= 1 and document_status(db, accepted) == "extracting" else None

    return wait_until(claimed, timeout=60, interval=0.02)


def document_status(db, accepted: Accepted) -> str:
    with db.session() as s:
        return s.execute(text("SELECT status FROM documents WHERE id = :d"), {"d": accepted.document_id}).scalar_one()


def planned_chunks(db, accepted: Accepted) -> int:
    with db.session() as s:
        return s.execute(text("SELECT count(*) FROM job_chunks WHERE job_id = :j"), {"j": accepted.job_id}).scalar_one()


def finished(db, accepted: Accepted, timeout: float = 180) -> dict:
    return wait_until(
        lambda: (j := job_state(db, accepted.job_id))["status"] in ("succeeded", "failed") and j, timeout=timeout
    )


def assert_stored_once(db, accepted: Accepted) -> dict:
    """The document done, one memory per chunk (no chunk_index twice), one vector per memory and sector."""
    found = facts(db, accepted.document_id, accepted.job_id)
    assert_complete_once(found)
    with db.session() as s:
        vectors = s.execute(
            text(
                "SELECT count(*) AS vectors, count(DISTINCT v.memory_id) AS memories, "
                "(SELECT coalesce(sum(cardinality(sectors)), 0) FROM memories WHERE document_id = :d) AS sectors "
                "FROM memory_vectors v JOIN memories m ON m.id = v.memory_id WHERE m.document_id = :d"
            ),
            {"d": accepted.document_id},
        ).one()
    assert vectors.memories == found["memories"], vectors
    assert vectors.vectors == vectors.sectors, vectors  # each of a memory's sectors embedded once
    return found


def kill_group(proc) -> None:
    """kill -9 the worker: its main process, its pool and the parser processes under them, at once."""
    members = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    os.killpg(proc.pid, signal.SIGKILL)
    for member in members:  # any that left the group
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()
    proc.wait(timeout=10)


@pytest.mark.parametrize("kind", ["a long PDF", "a recording"])
def test_a_worker_killed_mid_extraction_has_the_document_redone_and_stored_once(
    db, servers, settings, tenant, tmp_path, kind
):
    broker = servers["redis_url"].rsplit("/", 1)[0] + "/6"
    redis.Redis.from_url(broker).flushdb()
    isolated = settings.model_copy(update={"redis_url": broker})
    # A short lease: the sweeper re-sends the dead worker's document 3 s after its last renewal.
    env = service_env(servers, REDIS_URL=broker, MNEMOFLOW_JOB_LEASE_SECONDS="3")
    if kind == "a recording":
        accepted = recording(db, tenant, tmp_path)
    else:
        accepted = long_document(db, tenant, tmp_path, "Killed ledger. ")
    app = make_celery(isolated, "tests.ingest-kill9")
    name = f"ingest-kill9-{uuid.uuid4().hex[:4]}"
    try:
        with running(worker_args(f"{name}-a", queues=QUEUES), env, tmp_path / "a.log") as proc:
            wait_for_worker(isolated, f"{name}-a", proc, log_path=tmp_path / "a.log")
            send(app, IngestDocument(job_id=accepted.job_id, user_id=tenant))
            extracting(db, accepted)
            kill_group(proc)
            killed = time.monotonic()
        # Killed mid-extraction: nothing planned, the document still claimed by the dead worker.
        assert document_status(db, accepted) == "extracting"
        assert planned_chunks(db, accepted) == 0
        assert job_state(db, accepted.job_id)["attempts"] == 1
        with running(worker_args(f"{name}-b", queues=QUEUES), env, tmp_path / "b.log") as second:
            wait_for_worker(isolated, f"{name}-b", second, log_path=tmp_path / "b.log")
            with sweeping(app):
                job = finished(db, accepted)
            print(f"\n{kind} killed mid-extraction was done {time.monotonic() - killed:.1f}s after the kill")
    finally:
        app.close()
    assert job["status"] == "succeeded", job
    # The killed claim and the sweeper's: the second extraction's heartbeat kept its lease, so no duplicate
    # message the sweeper sent meanwhile claimed it a third time.
    assert job["attempts"] == 2, job
    assert_stored_once(db, accepted)
    assert "sweeper re-sent" in (tmp_path / "b.log").read_text()
