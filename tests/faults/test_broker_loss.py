"""Valkey killed mid-batch (`kill -9`), restarted with its data or empty (FLUSHALL): every chunk is stored once.
With its data, the queued messages are still there; without, the sweeper re-sends the work nobody claimed."""

from __future__ import annotations

import os
import signal

import pytest
import redis

from infra.embedded import EmbeddedRedis, free_port
from shared.jobs import ChunkSpec, Queue, StoreChunk, embed_queue
from shared.queueing import make_celery, send
from shared.storage import jobs as job_store
from tests.conftest import running, service_env, wait_for_worker, worker_args
from tests.integration.helpers import job_state, memory_count, sweeping, wait_until

pytestmark = pytest.mark.integration

CHUNKS, PER_CHUNK = 8, 500


def _job(db, tenant: str):
    with db.session(tenant) as s:
        job_id, _ = job_store.create_job(
            s, user_id=tenant, kind="batch", total=CHUNKS * PER_CHUNK, params={}, idempotency_key=None
        )
        job_store.add_chunks(
            s,
            job_id,
            [
                ChunkSpec(
                    seq,
                    "semantic",
                    [{"content": f"Broker loss {seq}.{i}: the tide gauge read {i}"} for i in range(PER_CHUNK)],
                )
                for seq in range(CHUNKS)
            ],
        )
    return job_id


@pytest.mark.parametrize("restarted", ["with its data", "empty"])
def test_valkey_killed_mid_batch_loses_and_duplicates_nothing(db, servers, settings, tenant, tmp_path, restarted):
    port = free_port()
    valkey = EmbeddedRedis(tmp_path / "valkey", port=port, persist=True)
    url = valkey.start()
    broker = settings.model_copy(update={"redis_url": url})
    # The sweeper's "sent but never claimed" clock at its minimum, so the lost messages are re-sent soon.
    env = service_env(servers, REDIS_URL=url, MNEMOFLOW_JOB_STALL_SECONDS="5")
    job_id = _job(db, tenant)
    app = make_celery(broker, "tests.broker-loss")
    queues = (embed_queue("semantic"), Queue.SWEEP, Queue.MAINTENANCE)
    try:
        with running(worker_args("broker-loss", queues=queues, concurrency=1), env, tmp_path / "w.log") as proc:
            wait_for_worker(broker, "broker-loss", proc, log_path=tmp_path / "w.log")
            send(app, *(StoreChunk(job_id=job_id, seq=seq, sector="semantic", user_id=tenant) for seq in range(CHUNKS)))
            wait_until(lambda: job_state(db, job_id)["progress_done"] >= PER_CHUNK, interval=0.05)
            pid = redis.Redis.from_url(url).info("server")["process_id"]
            os.kill(int(pid), signal.SIGKILL)
            valkey.stop()
            valkey = EmbeddedRedis(tmp_path / "valkey", port=port, persist=True)
            assert valkey.start() == url
            if restarted == "empty":
                redis.Redis.from_url(url).flushall()
            with sweeping(app):
                job = wait_until(
                    lambda: (j := job_state(db, job_id))["status"] in ("succeeded", "failed") and j, timeout=180
                )
    finally:
        app.close()
        valkey.stop()
    assert job["status"] == "succeeded", job
    assert memory_count(db, tenant) == CHUNKS * PER_CHUNK
    assert job["progress_done"] == CHUNKS * PER_CHUNK  # each chunk counted once
