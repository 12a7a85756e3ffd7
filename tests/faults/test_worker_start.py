"""A worker process serves only when it has its database and models: one that cannot start retries, then exits
to be restarted, and says why in /health's worker report; a fresh store started many times over gives every pool
process its database and every first job succeeds."""

from __future__ import annotations

import os
import uuid

import psutil
import pytest
import redis

from infra.embedded import free_port
from shared import worker_status
from shared.db import schema_session
from shared.embedding import SyntheticEmbedder
from shared.jobs import StoreChunk
from shared.queueing import make_celery, send
from shared.storage.sector_models import ensure_store_model
from tests.conftest import running, service_env, wait_for_worker, worker_args
from tests.integration.helpers import job_state, make_job, wait_until

pytestmark = pytest.mark.integration

# The acceptance suite starts the stack 20 times (make test-full); CI a few times.
START_ROUNDS = 20 if os.environ.get("MNEMOFLOW_TEST_FULL") else 3


def _isolated(servers: dict[str, str], db: int) -> str:
    """A broker database of its own, so no other test's worker takes these messages and no report mixes."""
    url = servers["redis_url"].rsplit("/", 1)[0] + f"/{db}"
    redis.Redis.from_url(url).flushdb()
    return url


def test_a_worker_without_its_database_exits_saying_why(servers, tmp_path):
    dead = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nowhere"
    env = service_env(servers, DATABASE_URL=dead, MNEMOFLOW_WORKER_START_SECONDS="3")
    log_path = tmp_path / "worker.log"
    with running(worker_args("no-database"), env, log_path) as proc:
        code = proc.wait(timeout=60)
    assert code != 0
    assert "cannot reach the database after 3s" in log_path.read_text()


def test_a_pool_process_that_cannot_start_serves_nothing_and_is_reported(
    servers, settings, make_store, tenant, tmp_path
):
    url, store = make_store("refusing")
    store = store.bound(tenant)
    # the store's vectors are 384-d (recorded as a process starting does, as the owner); this worker is set for 256
    with schema_session(settings.model_copy(update={"database_url": url}), "mnemoflow.tests.start") as s:
        ensure_store_model(s, SyntheticEmbedder(dim=384))
    broker = _isolated(servers, 11)
    env = service_env(
        servers, DATABASE_URL=url, REDIS_URL=broker, MNEMOFLOW_VECTOR_DIM="256", MNEMOFLOW_WORKER_START_SECONDS="2"
    )
    job_id = make_job(store, tenant, [{"content": "never stored by a worker that cannot start"}])
    client = redis.Redis.from_url(broker)
    app = make_celery(settings.model_copy(update={"redis_url": broker}), "tests.refusing")
    try:
        with running(worker_args("refusing", concurrency=1), env, tmp_path / "worker.log"):
            send(app, StoreChunk(job_id=job_id, seq=0, sector="semantic", user_id=tenant))
            report = wait_until(lambda: (r := worker_status.summary(client))["failing"] and r, timeout=60)
            assert report["ready"] == 0
            assert "384" in report["failing"][0]["error"] and "256" in report["failing"][0]["error"]
            job = job_state(store, job_id)
            assert job["status"] == "queued" and job["attempts"] == 0  # no half-started process took it
    finally:
        app.close()


SECTORS = ("semantic", "episodic", "procedural", "emotional")


def _finished(store, job_id):
    job = job_state(store, job_id)
    return job if job["status"] in ("succeeded", "failed") else None


def _start_once(round_: int, servers, settings, make_store, tenant, tmp_path) -> None:
    # A store never opened before: the first processes to start create its vector indexes, at once.
    url, store = make_store(f"start{round_}")
    store = store.bound(tenant)
    broker = _isolated(servers, 12)
    name = f"start-{round_}-{uuid.uuid4().hex[:4]}"
    jobs = [make_job(store, tenant, [{"content": f"first job {round_}.{sector}"}], sector=sector) for sector in SECTORS]
    isolated = settings.model_copy(update={"redis_url": broker, "database_url": url})
    app = make_celery(isolated, "tests.start")
    client = redis.Redis.from_url(broker)
    log_path = tmp_path / f"{name}.log"
    try:
        with running(
            worker_args(name, concurrency=2), service_env(servers, DATABASE_URL=url, REDIS_URL=broker), log_path
        ) as proc:
            wait_for_worker(isolated, name, proc, log_path=log_path)
            report = wait_until(lambda: (r := worker_status.summary(client))["ready"] == 2 and r, timeout=30)
            assert report["failing"] == [], round_
            _assert_sandboxes_warm(client)
            for job_id, sector in zip(jobs, SECTORS, strict=True):
                send(app, StoreChunk(job_id=job_id, seq=0, sector=sector, user_id=tenant))
            for job_id in jobs:
                job = wait_until(lambda j=job_id: _finished(store, j), timeout=60)
                assert job["status"] == "succeeded", (round_, job)
    finally:
        app.close()
        store.dispose()
    # no start-up error, not even one that a retry got past
    trouble = ("Signal handler", "cannot start", "could not start (", "Deadlock")
    assert not [line for line in log_path.read_text().splitlines() if any(t in line for t in trouble)], log_path


def _assert_sandboxes_warm(client: redis.Redis) -> None:
    """Every process that says it is ready (on the ingest queue, as these are) has its parser sandbox up: the
    forkserver its documents' children come from, with the parsers loaded (PDFium among them), so its first
    document does not wait seconds for them."""
    pids = [int(key.decode().rsplit(":", 1)[1]) for key in client.scan_iter(match=f"{worker_status.PREFIX}*")]
    assert len(pids) == 2
    for pid in pids:
        servers = [c for c in psutil.Process(pid).children() if "forkserver" in " ".join(c.cmdline())]
        assert len(servers) == 1, pid
        assert any("pdfium" in m.path for m in servers[0].memory_maps()), "the sandbox's parsers are not loaded"


@pytest.mark.timeout(120 * START_ROUNDS)  # a start and its first jobs take 10-60 s, more on a loaded machine
def test_every_start_gives_every_pool_process_its_database(servers, settings, make_store, tenant, tmp_path):
    for round_ in range(START_ROUNDS):
        _start_once(round_, servers, settings, make_store, tenant, tmp_path)
