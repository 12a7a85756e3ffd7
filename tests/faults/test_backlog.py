"""A backlog never fails healthy work: documents waiting behind slow extractions are re-sent by the sweeper
(their messages look lost), yet each is extracted once, with one attempt, and none "gives up"."""

from __future__ import annotations

import os
import uuid

import pytest
import redis
from sqlalchemy import text

from shared.jobs import IngestDocument, Queue
from shared.queueing import make_celery, send
from tests.conftest import running, service_env, wait_for_worker, worker_args
from tests.integration.helpers import sweeping, wait_until
from tests.integration.ingest.test_pipeline import staged
from tests.unit.ingest import samples

pytestmark = pytest.mark.integration

# Two long documents take both worker processes; the others wait behind them long enough to be re-sent, and
# when the long ones are done each waiting document and its duplicates reach the two processes together.
LONG_PAGES = 600
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
    env = service_env(servers, REDIS_URL=broker, MNEMOFLOW_JOB_STALL_SECONDS="5", MNEMOFLOW_JOB_MAX_ATTEMPTS="2")
    jobs = []
    for i in range(2 + WAITING):
        pages = LONG_PAGES if i < 2 else 60
        path = samples.pdf(tmp_path / f"b{i}.pdf", pages=pages, paragraphs_per_page=3, label=f"Ledger {i}. ")
        accepted = staged(db, tenant, path, chunk_size=400)
        assert accepted.job_id is not None
        jobs.append(accepted.job_id)
    app = make_celery(isolated, "tests.backlog")
    name = f"backlog-{uuid.uuid4().hex[:4]}"
    log_path = tmp_path / "worker.log"
    try:
        with running(worker_args(name, queues=(Queue.INGEST, Queue.SWEEP)), env, log_path) as proc:
            wait_for_worker(isolated, name, proc, log_path=log_path)
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
    assert "sweeper re-sent" in log  # the backlog did look lost: duplicates were sent
    assert "gave up" not in log
    assert sorted(status for status, _, _ in states) == ["embedding"] * len(jobs), states
    assert [attempts for _, attempts, _ in states] == [1] * len(jobs), states  # one claim, one extraction each
