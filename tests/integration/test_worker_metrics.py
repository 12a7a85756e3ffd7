"""A real prefork worker's Prometheus endpoint (workers/metrics.py, shared/monitoring/metrics.py): every pool
process's counts summed, task latency and outcomes per task and queue, chunks and items stored, and each queue's
depth read from the broker (Celery's priority lists included)."""

from __future__ import annotations

import uuid
from collections import defaultdict
from pathlib import Path

import httpx
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from infra.embedded import free_port
from shared.jobs import ALL_QUEUES, StoreChunk, TaskName
from shared.queueing import make_celery, send
from tests.conftest import running, service_env, wait_for_worker, worker_args
from tests.integration.helpers import job_state, make_job, wait_until

pytestmark = pytest.mark.integration

SECTORS = ("semantic", "episodic", "procedural")


def scrape(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Every sample of the endpoint: {sample name: {sorted labels: value}}."""
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(dict)
    for family in text_string_to_metric_families(httpx.get(url, timeout=10).text):
        for sample in family.samples:
            samples[sample.name][tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def total(samples: dict, name: str, **labels: str) -> float:
    return sum(v for key, v in samples.get(name, {}).items() if labels.items() <= dict(key).items())


def test_a_prefork_worker_exports_every_pool_process_counts_and_the_queue_depths(
    db, servers, settings, tenant, tmp_path: Path
) -> None:
    # A broker database of its own: the depths are this test's messages only.
    broker = servers["redis_url"].rsplit("/", 1)[0] + "/8"
    redis.Redis.from_url(broker).flushdb()
    isolated = settings.model_copy(update={"redis_url": broker})
    port, directory = free_port(), tmp_path / "metrics"
    env = service_env(
        servers, REDIS_URL=broker, MNEMOFLOW_WORKER_METRICS_PORT=str(port), MNEMOFLOW_WORKER_METRICS_DIR=str(directory)
    )
    name = f"metrics-{uuid.uuid4().hex[:6]}"
    queues = tuple(f"embed.{sector}" for sector in SECTORS)  # not embed.reflective: its messages wait there
    url = f"http://127.0.0.1:{port}/metrics"
    app = make_celery(isolated, "tests.metrics")
    try:
        # Waiting where no worker consumes: three ordinary messages and one sent with a priority, which the Redis
        # transport keeps in a list of its own ("embed.reflective\x06\x169").
        for _ in range(3):
            send(app, StoreChunk(job_id=uuid.uuid4(), seq=0, sector="reflective", user_id=tenant))
        app.send_task(TaskName.STORE_CHUNK, kwargs={}, queue="embed.reflective", priority=9)
        jobs = [
            make_job(db, tenant, [{"content": f"{sector} note {j}-{i} about herons"} for i in range(60)], sector=sector)
            for sector in SECTORS
            for j in range(2)
        ]
        log_path = tmp_path / "worker.log"
        with running(worker_args(name, queues=queues, concurrency=2), env, log_path) as proc:
            wait_for_worker(isolated, name, proc, log_path=log_path)
            for job_id, sector in zip(jobs, [s for s in SECTORS for _ in range(2)], strict=True):
                send(app, StoreChunk(job_id=job_id, seq=0, sector=sector, user_id=tenant))
            app.send_task(TaskName.STORE_CHUNK, kwargs={"job_id": "not a uuid"}, queue="embed.semantic")  # fails
            for job_id in jobs:
                wait_until(lambda job_id=job_id: job_state(db, job_id)["status"] == "succeeded")
            samples = wait_until(
                lambda: (
                    (s := scrape(url))
                    and total(s, "mnemoflow_worker_tasks_total", task=TaskName.STORE_CHUNK) == len(jobs) + 1
                    and s
                )
            )
            again = scrape(url)
    finally:
        app.close()

    tasks = "mnemoflow_worker_tasks_total"
    for sector in SECTORS:
        queue = f"embed.{sector}"
        assert total(samples, tasks, task=TaskName.STORE_CHUNK, queue=queue, outcome="succeeded") == 2
        assert total(samples, "mnemoflow_worker_task_seconds_count", task=TaskName.STORE_CHUNK, queue=queue) >= 2
        assert total(samples, "mnemoflow_worker_chunks_total", queue=queue, status="done") == 2
        assert total(samples, "mnemoflow_worker_chunk_items_total", queue=queue, outcome="created") == 120
    assert total(samples, tasks, task=TaskName.STORE_CHUNK, queue="embed.semantic", outcome="failed") == 1
    assert total(samples, "mnemoflow_worker_task_seconds_bucket", task=TaskName.STORE_CHUNK, le="+Inf") == len(jobs) + 1

    depths = {dict(k)["queue"]: v for k, v in samples["mnemoflow_queue_depth"].items()}
    assert set(depths) == set(ALL_QUEUES)
    assert depths["embed.reflective"] == 4  # the priority list counted with the others
    assert all(depths[queue] == 0 for queue in queues)
    assert samples["mnemoflow_broker_up"][()] == 1

    # Both pool processes wrote files of their own, and the endpoint summed them: nothing counted twice on a
    # second scrape, nothing lost.
    writers = {path.stem.rsplit("_", 1)[1] for path in directory.glob("*.db")}
    assert len(writers) >= 2, sorted(p.name for p in directory.glob("*.db"))
    assert total(again, tasks) == total(samples, tasks)
