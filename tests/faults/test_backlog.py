"""A backlog never fails healthy work: documents waiting behind slow extractions are re-sent by the sweeper
(their messages look lost), yet each is extracted once, with one attempt, and none "gives up"."""

from __future__ import annotations

import os
import uuid

import pytest
import redis
from sqlalchemy import text

from infra.processes import sweeper_command
from shared.ingest import intake
from shared.jobs import IngestDocument, Queue
from shared.queueing import make_celery, send
from tests.conftest import running, service_env, wait_for_worker, worker_args
from tests.integration.helpers import sweeping, trickling, wait_until
from tests.integration.ingest.test_pipeline import staged
from tests.unit.ingest import samples

pytestmark = pytest.mark.integration

# Two slow extractions take both worker processes; the documents behind them wait long enough to be re-sent (the
# stall clock is 5 s here), and when the slow ones are done each waiting document and its duplicates reach the two
# processes together. The slowness is a page served a line a second, so it does not depend on the machine's speed
# (long PDFs did: on an idle machine they were parsed before the sweeper ever saw the others waiting).
WAITING = 3 if os.environ.get("MNEMOFLOW_TEST_FULL") else 1


def _states(db, job_ids: list[uuid.UUID]) -> list[tuple[str, int, str]]:
    with db.session() as s:
        rows = s.execute(
            text(
                "SELECT d.status, j.attempts, coalesce(j.error, '') AS error FROM jobs j "
                "JOIN documents d ON d.job_id = j.id WHERE j.id = ANY(:ids)"
            ),
            {"ids": job_ids},
        ).all()
    return [(r.status, r.attempts, r.error) for r in rows]


def test_a_document_backlog_is_extracted_once_each_with_no_give_up(db, servers, settings, tenant, tmp_path):
    broker = servers["redis_url"].rsplit("/", 1)[0] + "/13"
    redis.Redis.from_url(broker).flushdb()
    isolated = settings.model_copy(update={"redis_url": broker})
    # The sweeper's "sent but never claimed" clock at its minimum, and one attempt of slack: the old re-send
    # timer counted every duplicate delivery as an attempt and gave up on documents still extracting.
    env = service_env(
        servers,
        REDIS_URL=broker,
        MNEMOFLOW_JOB_STALL_SECONDS="5",
        MNEMOFLOW_JOB_MAX_ATTEMPTS="2",
        MNEMOFLOW_INGEST_ALLOW_PRIVATE_URLS="true",  # the slow pages are served on loopback
    )
    app = make_celery(isolated, "tests.backlog")
    name = f"backlog-{uuid.uuid4().hex[:4]}"
    log_path, sweep_log = tmp_path / "worker.log", tmp_path / "sweeper.log"
    try:
        with trickling(seconds=12) as site:
            jobs = []
            for i in range(2):
                with db.session(tenant) as s:
                    accepted = intake.accept_url(
                        s, user_id=tenant, url=f"{site}/slow-{i}", params={"config": {"chunk_size": 400}}
                    )
                jobs.append(accepted.job_id)
            for i in range(WAITING):
                path = samples.pdf(tmp_path / f"b{i}.pdf", pages=30, paragraphs_per_page=3, label=f"Ledger {i}. ")
                jobs.append(staged(db, tenant, path, chunk_size=400).job_id)
            assert all(job_id is not None for job_id in jobs)
            # The sweeper on its own process, as `mnemoflow up` and compose run it: both ingest processes are busy.
            with (
                running(worker_args(name, queues=(Queue.INGEST,)), env, log_path) as proc,
                running(sweeper_command(name=f"{name}-sweep", quiet_startup=True), env, sweep_log) as sweeper,
            ):
                wait_for_worker(isolated, name, proc, log_path=log_path)
                wait_for_worker(isolated, f"{name}-sweep", sweeper, log_path=sweep_log)
                send(app, *(IngestDocument(job_id=job_id, user_id=tenant) for job_id in jobs))
                with sweeping(app):  # No embed worker here: a planned document waits in `embedding`, extracted.
                    states = wait_until(
                        lambda: (
                            (s := _states(db, jobs)) and all(st not in ("queued", "extracting") for st, _, _ in s) and s
                        ),
                        timeout=300,
                    )
    finally:
        app.close()
    log = log_path.read_text()
    assert "sweeper re-sent" in sweep_log.read_text()  # the backlog did look lost: duplicates were sent
    assert "gave up" not in log
    assert sorted(status for status, _, _ in states) == ["embedding"] * len(jobs), states
    assert [attempts for _, attempts, _ in states] == [1] * len(jobs), states  # one claim, one extraction each
