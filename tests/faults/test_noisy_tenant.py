"""A noisy tenant beside a quiet one: one tenant's backlog of large documents does not hold another tenant's small
batch behind it (fair queues, shared/backpressure.py). Real gateway, real worker embedding with the local model,
real broker; the quiet batch's time beside the backlog is measured against its time on the idle stack, in the same
test, and bounded generously (BOUND_FACTOR x idle + BOUND_SLACK_S): a test never fails on timing alone, and the
figures are bench/fairness.py's."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator

import httpx
import pytest
import redis
from sqlalchemy import text

from bench.fairness import finished, noisy_document, quiet_items
from infra.embedded import free_port
from infra.processes import gateway_command, wait_healthy
from shared.config import Settings
from shared.db import Database
from shared.jobs import Queue
from shared.memory.sectors import classify
from shared.text import normalize_content
from tests.conftest import running, service_env, wait_for_worker, worker_args

pytestmark = pytest.mark.integration

FULL = os.environ.get("MNEMOFLOW_TEST_FULL") == "1"
NOISY_DOCUMENTS = 12 if FULL else 3  # the attack's: three 32 KB Markdown files
# Priorities order what waits; they never stop a task already running. So the quiet batch may wait for the noisy
# task the worker is on (a document's task is about 8 model windows by estimate: 1-13 s of MiniLM measured on a
# 2-core machine at load 4) and for its own: the bound is BOUND_FACTOR x its idle time + two of the noisy tenant's
# longest tasks + BOUND_SLACK_S. Without fair queues it waits for the whole backlog (3 documents: 60-130 s there).
BOUND_FACTOR = 5
BOUND_SLACK_S = 5.0
BROKER_DB = 12


@pytest.fixture(scope="module")
def stack(servers, make_store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Database]]:
    """A gateway and one worker process (ingest and the embed queues) embedding with the local model, on a store
    and a broker database of their own; the gateway's URL and the store (app role)."""
    url, database = make_store("noisy_tenant")
    broker = servers["redis_url"].rsplit("/", 1)[0] + f"/{BROKER_DB}"
    redis.Redis.from_url(broker).flushdb()
    env = service_env(servers, DATABASE_URL=url, REDIS_URL=broker, MNEMOFLOW_EMBEDDING_PROVIDER="local")
    logs = tmp_path_factory.mktemp("noisy-logs")
    queues = (Queue.INGEST.value, *(q.value for q in Queue if q.value.startswith("embed.")))
    port = free_port()
    worker_settings = Settings(database_url=url, redis_url=broker)
    with (
        running(worker_args("noisy", queues=queues, concurrency=1), env, logs / "worker.log") as worker,
        running(gateway_command(host="127.0.0.1", port=port), env, logs / "gateway.log") as gateway,
    ):
        wait_for_worker(worker_settings, "noisy", worker, log_path=logs / "worker.log", timeout=180)
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base, gateway, log_path=logs / "gateway.log", timeout=180)
        yield base, database


def _jobs(http: httpx.Client, job_ids: list[str]) -> list[dict]:
    return [http.get(f"/jobs/{job_id}", params={"user_id": "noisy"}).json() for job_id in job_ids]


def _noisy_done(http: httpx.Client, job_ids: list[str]) -> int:
    """The noisy tenant's items stored so far."""
    return sum(job["progress"]["done"] for job in _jobs(http, job_ids))


def _noisy_tasks(database: Database) -> tuple[int, float]:
    """The most items one of the noisy tenant's chunks held, and the longest gap between two chunks finishing (a
    task's time, on one worker process)."""
    with database.session("noisy") as s:
        rows = s.execute(
            text(
                "SELECT c.item_count, c.done_at FROM job_chunks c JOIN jobs j ON j.id = c.job_id "
                "WHERE j.user_id = 'noisy' AND c.status = 'done' ORDER BY c.done_at"
            )
        ).all()
    gaps = [(b.done_at - a.done_at).total_seconds() for a, b in itertools.pairwise(rows)]
    return max(r.item_count for r in rows), max(gaps, default=0.0)


def _batch_seconds(http: httpx.Client, user_id: str, round_: str) -> float:
    """From sending the quiet tenant's batch to its job succeeding."""
    started = time.monotonic()
    accepted = http.post("/memory/batch", json={"user_id": user_id, "items": quiet_items(round_)})
    assert accepted.status_code == 202, accepted.text
    job = finished(http, accepted.json()["job_id"], user_id, timeout=600)
    assert job["status"] == "succeeded", job
    return time.monotonic() - started


def test_a_quiet_tenants_batch_is_not_held_behind_a_noisy_tenants_documents(stack):
    url, database = stack
    # Both land on one queue (their sector's), so only the priority can put the quiet batch first: round robin
    # between queues would let it through anyway.
    assert {
        classify(normalize_content(text)).primary for text in (quiet_items("x")[0]["content"], noisy_document(0))
    } == {"semantic"}
    with httpx.Client(base_url=url, timeout=60) as http:
        _batch_seconds(http, "quiet", "warm")  # the model's first call, the pools' first connections
        idle = min(_batch_seconds(http, "quiet", f"idle-{i}") for i in range(2))
        documents = []
        for n in range(NOISY_DOCUMENTS):
            body = {"user_id": "noisy", "content_type": "md", "data": noisy_document(n), "filename": f"ledger-{n}.md"}
            accepted = http.post("/memory/ingest", json=body)
            assert accepted.status_code == 202, accepted.text
            documents.append(accepted.json()["job_id"])

        def under_way() -> bool:  # every document parsed, its chunks on the embed queue, and the first stored
            jobs = _jobs(http, documents)
            return all(job["progress"]["total"] > 0 for job in jobs) and any(job["progress"]["done"] for job in jobs)

        deadline = time.monotonic() + 300
        while not under_way():
            assert time.monotonic() < deadline, "the noisy documents were not parsed"
            time.sleep(0.1)
        before = _noisy_done(http, documents)
        busy = _batch_seconds(http, "quiet", "busy")
        meanwhile = _noisy_done(http, documents) - before
        left = sum(job["progress"]["total"] for job in _jobs(http, documents)) - before - meanwhile
        for job_id in documents:  # the noisy tenant is served too, after
            assert finished(http, job_id, "noisy", timeout=600)["status"] == "succeeded"
        task_items, longest_task = _noisy_tasks(database)
        bound = BOUND_FACTOR * idle + 2 * longest_task + BOUND_SLACK_S
        print(
            f"quiet batch: idle {idle:.2f} s, beside {NOISY_DOCUMENTS} noisy documents {busy:.2f} s"
            f" (bound {bound:.1f} s: noisy tasks of at most {task_items} items, {longest_task:.1f} s);"
            f" {meanwhile} noisy items stored meanwhile, {left} still waiting"
        )
        # the order, which holds on any machine: it waited for the task in progress and at most one more
        assert meanwhile <= 2 * task_items, f"{meanwhile} noisy items went first ({left} left behind it)"
        assert left > 0, "the backlog was gone before the quiet batch finished: nothing was measured"
        assert busy <= bound, f"the quiet batch took {busy:.1f} s beside the backlog, {idle:.2f} s idle"
