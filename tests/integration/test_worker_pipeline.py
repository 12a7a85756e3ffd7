"""Real `celery worker` processes on a real broker: lost messages, killed workers, an external Redis."""

from __future__ import annotations

import os
import signal
import socket
import time
import uuid

import psutil
import pytest
from sqlalchemy import text

from shared.jobs import StoreChunk, SweepJobs
from shared.queueing import make_celery, send
from shared.storage import decay_runs, locks
from shared.storage.locks import Lock
from tests.conftest import running, service_env, wait_for_worker, worker_args
from tests.integration.helpers import job_state, make_job, memory_count, wait_until

pytestmark = pytest.mark.integration


def test_sweeper_resends_a_chunk_whose_message_was_lost(db, settings, worker, tenant):
    job_id = make_job(db, tenant, [{"content": f"Orphaned note {i}"} for i in range(20)])
    with db.session() as s:  # the gateway committed, then the broker lost the message long ago
        s.execute(
            text("UPDATE job_chunks SET enqueued_at = now() - interval '1 hour' WHERE job_id = :j"), {"j": job_id}
        )
    app = make_celery(settings, "tests.sweeper")
    try:
        send(app, SweepJobs())
        wait_until(lambda: job_state(db, job_id)["status"] == "succeeded")
    finally:
        app.close()
    assert memory_count(db, tenant) == 20


def test_sweeper_sends_an_operators_decay_run_whose_message_was_lost(maintenance, settings, worker):
    with maintenance.session() as s:  # the gateway committed the run; the broker was down, so no message went out
        run_id = decay_runs.create_run(s, trigger="operator", ratio=0.001)
        s.execute(text("UPDATE decay_runs SET created_at = now() - interval '1 hour' WHERE id = :id"), {"id": run_id})

    def ended():
        with maintenance.session() as s:
            run = decay_runs.get_run(s, run_id)
        return run if run is not None and run["status"] in ("succeeded", "skipped", "failed") else None

    app = make_celery(settings, "tests.sweeper")
    try:
        send(app, SweepJobs())
        run = wait_until(ended)
    finally:
        app.close()
    # Skipped only if another cycle held the lock at that moment; either way the run did not stay queued.
    assert run["status"] in ("succeeded", "skipped"), run


def fresh_of(db, tenant: str) -> int:
    with db.session() as s:
        fresh = text("SELECT count(*) FROM memory_vectors WHERE user_id = :t AND NOT indexed")
        return int(s.execute(fresh, {"t": tenant}).scalar_one())


def test_a_merge_that_found_another_running_asks_again_so_the_fresh_tier_drains_without_beat(
    db, maintenance, settings, worker, tenant
):
    """The merge a chunk asks for can find another run holding the lock (as when that run stops for ingestion just
    as the burst's last chunk asks): it must ask again itself, or the fresh tier waits for beat (none here)."""
    job_id = make_job(
        db, tenant, [{"content": f"Harbour log entry {i}: the tide turned at {i % 12}"} for i in range(30)]
    )
    app = make_celery(settings, "tests.merge")
    try:
        with maintenance.engine.connect() as holder:
            # Another run, as far as the worker can tell (once an earlier test's merge, if one is running, is done).
            assert wait_until(lambda: locks.try_hold(holder, Lock.MERGE), timeout=60)
            try:
                send(app, StoreChunk(job_id=job_id, seq=0, sector="semantic", user_id=tenant))
                wait_until(lambda: job_state(db, job_id)["status"] == "succeeded")
                time.sleep(1.0)  # the merge the chunk asked for has run by now, and found the lock held
                assert fresh_of(db, tenant) == 30
            finally:
                locks.release(holder, Lock.MERGE)
        wait_until(lambda: fresh_of(db, tenant) == 0, timeout=30)  # asked again within MERGE_AGAIN_SECONDS
    finally:
        app.close()


def test_a_worker_killed_mid_chunk_loses_and_duplicates_nothing(db, servers, settings, tenant, tmp_path):
    # A worker of its own on a broker database of its own: killing pool processes must not disturb others.
    broker = servers["redis_url"].rsplit("/", 1)[0] + "/7"
    isolated = settings.model_copy(update={"redis_url": broker})
    name = f"killme-{uuid.uuid4().hex[:6]}"
    log_path = tmp_path / "worker.log"
    items = [{"content": f"Telemetry sample {i} from sensor {i % 97} at dawn"} for i in range(4000)]
    job_id = make_job(db, tenant, items)
    with running(worker_args(name, concurrency=1), service_env(servers, REDIS_URL=broker), log_path) as proc:
        wait_for_worker(isolated, name, proc, log_path=log_path)
        app = make_celery(isolated, "tests.kill")
        try:
            send(app, StoreChunk(job_id=job_id, seq=0, sector="semantic", user_id=tenant))
            wait_until(lambda: job_state(db, job_id)["attempts"] >= 1, interval=0.02)
            time.sleep(0.3)  # inside the chunk's transaction: embedding and inserting 4,000 memories
            children = psutil.Process(proc.pid).children(recursive=True)
            assert children, "a prefork worker has pool processes"
            for child in children:
                os.kill(child.pid, signal.SIGKILL)
            job = wait_until(
                lambda: (j := job_state(db, job_id))["status"] in ("succeeded", "failed") and j, timeout=120
            )
        finally:
            app.close()
    assert job["status"] == "succeeded", job
    assert job["attempts"] >= 2  # the killed attempt counted, the redelivery finished the work
    assert memory_count(db, tenant) == 4000
    with db.session() as s:
        vectors = s.execute(
            text("SELECT count(DISTINCT memory_id) FROM memory_vectors WHERE user_id = :u"), {"u": tenant}
        ).scalar_one()
    assert vectors == 4000


def _system_redis() -> str | None:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            if sock.recv(16).startswith(b"+PONG"):
                return "redis://127.0.0.1:6379/14"
    except OSError:
        return None
    return None


@pytest.mark.skipif(_system_redis() is None, reason="no Redis server on 127.0.0.1:6379 (a fresh machine has none)")
def test_an_external_redis_server_carries_the_queues(db, servers, settings, tenant, tmp_path):
    redis_url = _system_redis()
    assert redis_url is not None
    external = settings.model_copy(update={"redis_url": redis_url})
    name = f"external-{uuid.uuid4().hex[:6]}"
    env = service_env(servers, REDIS_URL=redis_url)
    log_path = tmp_path / "worker.log"
    with running(worker_args(name, concurrency=1), env, log_path) as proc:
        wait_for_worker(external, name, proc, log_path=log_path)
        job_id = make_job(db, tenant, [{"content": f"Carried by system Redis {i}"} for i in range(10)])
        app = make_celery(external, "tests.external")
        try:
            send(app, StoreChunk(job_id=job_id, seq=0, sector="semantic", user_id=tenant))
            wait_until(lambda: job_state(db, job_id)["status"] == "succeeded")
        finally:
            app.close()
    assert memory_count(db, tenant) == 10
