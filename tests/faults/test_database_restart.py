"""PostgreSQL restarted mid-batch: the chunk whose transaction the restart cut is claimed again once its lease
runs out (its attempt counted), the workers' pools reconnect, and every memory is stored once. Restarted
mid-ingest: the document whose plan the restart refused is extracted again, and every chunk is stored once."""

from __future__ import annotations

import time

import pytest
import redis

from infra.embedded import EmbeddedPostgres
from infra.migrate import upgrade
from shared.db import Database, create_db_engine
from shared.jobs import ChunkSpec, IngestDocument, Queue, StoreChunk, embed_queue
from shared.queueing import make_celery, send
from shared.storage import jobs as job_store
from tests.conftest import running, service_env, wait_for_worker, worker_args
from tests.faults.test_ingest_loss import PAGES, assert_stored_once, extracting, finished, long_document
from tests.faults.test_ingest_loss import QUEUES as INGEST_QUEUES
from tests.integration.helpers import job_state, memory_count, sweeping, wait_until

pytestmark = pytest.mark.integration

CHUNKS, PER_CHUNK = 8, 1000


def _started(postgres: EmbeddedPostgres) -> str | None:
    try:
        return postgres.start()
    except Exception:  # the server's socket is not there yet
        return None


def test_postgres_restarted_mid_batch_loses_and_duplicates_nothing(servers, settings, tenant, tmp_path):
    postgres = EmbeddedPostgres(tmp_path / "pgdata", database="restarted")
    url = postgres.start()
    upgrade(url)
    broker = servers["redis_url"].rsplit("/", 1)[0] + "/9"
    redis.Redis.from_url(broker).flushdb()
    mine = settings.model_copy(update={"database_url": url, "redis_url": broker})
    db = Database(create_db_engine(mine, "tests.restart", pool_size=2)).bound(tenant)  # the app role, as a tenant
    with db.session() as s:
        job_id, _ = job_store.create_job(
            s, user_id=tenant, kind="batch", total=CHUNKS * PER_CHUNK, params={}, idempotency_key=None
        )
        items = [
            [{"content": f"Restart {seq}.{i}: the ledger line {i}"} for i in range(PER_CHUNK)] for seq in range(CHUNKS)
        ]
        job_store.add_chunks(s, job_id, [ChunkSpec(seq, "semantic", chunk) for seq, chunk in enumerate(items)])
    env = service_env(servers, DATABASE_URL=url, REDIS_URL=broker, MNEMOFLOW_JOB_LEASE_SECONDS="3")
    app = make_celery(mine, "tests.restart")
    queues = (embed_queue("semantic"), Queue.SWEEP, Queue.MAINTENANCE)
    try:
        with running(worker_args("pg-restart", queues=queues, concurrency=2), env, tmp_path / "w.log") as proc:
            wait_for_worker(mine, "pg-restart", proc, log_path=tmp_path / "w.log")
            send(app, *(StoreChunk(job_id=job_id, seq=seq, sector="semantic", user_id=tenant) for seq in range(CHUNKS)))
            wait_until(lambda: job_state(db, job_id)["progress_done"] >= PER_CHUNK, interval=0.05)
            postgres.stop()  # a fast shutdown: every session is cut, chunks in flight roll back
            assert wait_until(lambda: _started(postgres), timeout=60) == url
            with sweeping(app):
                job = wait_until(
                    lambda: (j := job_state(db, job_id))["status"] in ("succeeded", "failed") and j, timeout=180
                )
        assert job["status"] == "succeeded", job
        assert memory_count(db, tenant) == CHUNKS * PER_CHUNK
        assert job["progress_done"] == CHUNKS * PER_CHUNK
    finally:
        app.close()
        db.dispose()
        postgres.stop()


def test_postgres_restarted_mid_ingest_finishes_the_document_once(servers, settings, tenant, tmp_path):
    """PostgreSQL goes away while a long document is being extracted and is still away when the worker comes to
    write its plan: that attempt is cut (its heartbeat could not renew the lease meanwhile), and once the server
    is back the document is extracted again (the task's own retry or the sweeper's re-send, whichever claims it
    first; the other finds it claimed) and every chunk is stored once."""
    postgres = EmbeddedPostgres(tmp_path / "pgdata", database="restarted")
    url = postgres.start()
    upgrade(url)
    broker = servers["redis_url"].rsplit("/", 1)[0] + "/5"
    redis.Redis.from_url(broker).flushdb()
    mine = settings.model_copy(update={"database_url": url, "redis_url": broker})
    db = Database(create_db_engine(mine, "tests.restart-ingest", pool_size=2)).bound(tenant)
    # long enough that its extraction (~0.4 ms a page) outlasts the pause below: the server must go while it runs
    accepted = long_document(db, tenant, tmp_path, "Restarted ledger. ", pages=4 * PAGES)
    env = service_env(servers, DATABASE_URL=url, REDIS_URL=broker, MNEMOFLOW_JOB_LEASE_SECONDS="3")
    app = make_celery(mine, "tests.restart-ingest")
    log_path = tmp_path / "w.log"
    try:
        with running(worker_args("pg-restart-ingest", queues=INGEST_QUEUES), env, log_path) as proc:
            wait_for_worker(mine, "pg-restart-ingest", proc, log_path=log_path)
            send(app, IngestDocument(job_id=accepted.job_id, user_id=tenant))
            extracting(db, accepted)
            time.sleep(0.3)  # past reading the staged upload: into the parser, which needs no database
            postgres.stop()
            cut = f"[ingest] job {accepted.job_id}: cannot reach the database"
            wait_until(lambda: cut in log_path.read_text(), timeout=120, interval=0.2)  # extracted, plan refused
            assert wait_until(lambda: _started(postgres), timeout=60) == url
            with sweeping(app):
                job = finished(db, accepted)
        assert job["status"] == "succeeded", job
        assert job["attempts"] == 2, job  # the cut attempt, and the one that planned
        assert_stored_once(db, accepted)
    finally:
        app.close()
        db.dispose()
        postgres.stop()
