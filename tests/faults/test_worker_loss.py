"""Work survives its worker: killed outright (the sweeper re-sends it once its lease runs out, at the default
lease and sweep interval, with a real beat), stopped with SIGTERM, or its message delivered twice while it runs.
Every case ends with each memory stored once and its vector once."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest
import redis
from sqlalchemy import text

from shared.jobs import Queue, StoreChunk, embed_queue
from shared.queueing import make_celery, send
from tests.conftest import running, service_env, wait_for_worker, worker_args
from tests.integration.helpers import job_state, make_job, memory_count, wait_until

pytestmark = pytest.mark.integration

QUEUES = (embed_queue("semantic"), Queue.MAINTENANCE, Queue.SWEEP)


def _broker(servers, db: int) -> str:
    url = servers["redis_url"].rsplit("/", 1)[0] + f"/{db}"
    redis.Redis.from_url(url).flushdb()
    return url


def _items(n: int, tag: str) -> list[dict]:
    return [{"content": f"{tag} reading {i} from gauge {i % 89} before the storm"} for i in range(n)]


def _stored_once(db, tenant: str, n: int) -> None:
    assert memory_count(db, tenant) == n
    with db.session(tenant) as s:
        vectors = s.execute(
            text("SELECT count(*), count(DISTINCT memory_id) FROM memory_vectors WHERE user_id = :u"), {"u": tenant}
        ).one()
    assert tuple(vectors) == (n, n)


def _in_flight(db, job_id) -> None:
    """Wait until a worker has claimed the chunk and is inside its transaction."""
    wait_until(lambda: job_state(db, job_id)["attempts"] >= 1, interval=0.02)
    time.sleep(0.3)


def _finished(db, job_id, timeout: float = 150):
    return wait_until(lambda: (j := job_state(db, job_id))["status"] in ("succeeded", "failed") and j, timeout=timeout)


def test_a_worker_killed_outright_mid_chunk_has_its_work_redone_once(db, servers, settings, tenant, tmp_path):
    broker = _broker(servers, 14)
    isolated = settings.model_copy(update={"redis_url": broker})
    env = service_env(servers, REDIS_URL=broker)  # the default lease (20 s) and sweep interval (15 s)
    job_id = make_job(db, tenant, _items(4000, "Killed"))
    app = make_celery(isolated, "tests.kill9")
    beat = ["celery", "-A", "workers.app", "beat", "--loglevel", "INFO", "-s", str(tmp_path / "beat-schedule")]
    try:
        with running(beat, env, tmp_path / "beat.log"):
            with running(worker_args("kill9-a", queues=QUEUES, concurrency=1), env, tmp_path / "a.log") as proc:
                wait_for_worker(isolated, "kill9-a", proc, log_path=tmp_path / "a.log")
                send(app, StoreChunk(job_id=job_id, seq=0, sector="semantic", user_id=tenant))
                _in_flight(db, job_id)
                for process in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]:
                    os.kill(process.pid, signal.SIGKILL)  # the whole worker; its message stays unacknowledged
                killed = time.monotonic()
                proc.wait()
            with running(worker_args("kill9-b", queues=QUEUES, concurrency=1), env, tmp_path / "b.log") as second:
                wait_for_worker(isolated, "kill9-b", second, log_path=tmp_path / "b.log")
                job = _finished(db, job_id)
                recovered = time.monotonic() - killed
                print(f"\nthe killed worker's chunk ran again and finished {recovered:.1f}s after the kill")
    finally:
        app.close()
    assert job["status"] == "succeeded", job
    assert job["attempts"] == 2  # the killed claim and the one the sweeper's message made
    _stored_once(db, tenant, 4000)


def test_a_worker_stopped_with_sigterm_mid_chunk_finishes_or_leaves_it_whole(db, servers, settings, tenant, tmp_path):
    broker = _broker(servers, 15)
    isolated = settings.model_copy(update={"redis_url": broker})
    env = service_env(servers, REDIS_URL=broker, MNEMOFLOW_JOB_LEASE_SECONDS="3")
    job_id = make_job(db, tenant, _items(4000, "Stopped"))
    app = make_celery(isolated, "tests.sigterm")
    try:
        with running(worker_args("term-a", queues=QUEUES, concurrency=1), env, tmp_path / "a.log") as proc:
            wait_for_worker(isolated, "term-a", proc, log_path=tmp_path / "a.log")
            send(app, StoreChunk(job_id=job_id, seq=0, sector="semantic", user_id=tenant))
            _in_flight(db, job_id)
            os.killpg(proc.pid, signal.SIGTERM)  # a warm shutdown: the running task may finish first
            proc.wait(timeout=60)
        if job_state(db, job_id)["status"] != "succeeded":  # it did not: the next worker picks the work up
            with running(worker_args("term-b", queues=QUEUES, concurrency=1), env, tmp_path / "b.log") as second:
                wait_for_worker(isolated, "term-b", second, log_path=tmp_path / "b.log")
                send(
                    app, StoreChunk(job_id=job_id, seq=0, sector="semantic", user_id=tenant)
                )  # what the sweeper would send
                _finished(db, job_id)
    finally:
        app.close()
    assert job_state(db, job_id)["status"] == "succeeded"
    _stored_once(db, tenant, 4000)


def test_a_message_delivered_again_while_its_work_runs_changes_nothing(db, servers, settings, tenant, tmp_path):
    # What Redis does when a task outlives the visibility timeout, and what a message published twice does.
    broker = _broker(servers, 10)
    isolated = settings.model_copy(update={"redis_url": broker})
    env = service_env(servers, REDIS_URL=broker)
    job_id = make_job(db, tenant, _items(4000, "Twice"))
    app = make_celery(isolated, "tests.twice")
    try:
        with running(worker_args("twice", queues=QUEUES, concurrency=2), env, tmp_path / "w.log") as proc:
            wait_for_worker(isolated, "twice", proc, log_path=tmp_path / "w.log")
            send(app, StoreChunk(job_id=job_id, seq=0, sector="semantic", user_id=tenant))
            _in_flight(db, job_id)
            send(
                app, StoreChunk(job_id=job_id, seq=0, sector="semantic", user_id=tenant)
            )  # taken by the other pool process
            job = _finished(db, job_id)
            send(
                app, StoreChunk(job_id=job_id, seq=0, sector="semantic", user_id=tenant)
            )  # and once more, after it finished
            time.sleep(1.0)
    finally:
        app.close()
    assert job["status"] == "succeeded"
    assert job_state(db, job_id)["attempts"] == 1  # the duplicates counted no attempt
    _stored_once(db, tenant, 4000)
    log = (tmp_path / "w.log").read_text()
    assert "done, failed or being worked on" in log  # the duplicate found it and left
