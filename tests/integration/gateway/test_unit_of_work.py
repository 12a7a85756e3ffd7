"""The gateway's one way to write: commit, then send. With the broker down, the work is committed and left
for the sweeper, and the caller is answered 202 (a real gateway app in process, a real database, no broker)."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from infra.embedded import free_port
from services.gateway.app import create_app
from shared.storage import decay_runs
from shared.storage import jobs as job_store

pytestmark = pytest.mark.integration


def enqueue_failures() -> float:
    return REGISTRY.get_sample_value("mnemoflow_enqueue_failures_total") or 0.0


def test_with_the_broker_down_committed_work_is_answered_202_and_left_to_the_sweeper(settings, db, maintenance, tenant):
    nowhere = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there: every send fails
    app = create_app(settings.model_copy(update={"redis_url": nowhere}))
    with TestClient(app) as client:
        before = enqueue_failures()
        decay = client.post("/maintenance/decay", json={"ratio": 0.001})
        batch = client.post(
            "/memory/batch", json={"items": [{"content": "kept while the broker is down"}], "user_id": tenant}
        )
        assert enqueue_failures() - before == 2  # one message each, counted, not raised
    assert decay.status_code == 202, decay.text
    assert decay.json()["status"] == "queued"
    assert batch.status_code == 202, batch.text
    with maintenance.session() as s:
        run = decay_runs.get_run(s, uuid.UUID(decay.json()["id"]))
    with db.session() as s:
        job = job_store.get_job(s, uuid.UUID(batch.json()["job_id"]))
        pending = job_store.pending_chunks(s, uuid.UUID(batch.json()["job_id"]))
    assert run is not None and run["status"] == "queued"  # committed: the sweeper sends it (tests: worker pipeline)
    assert job is not None and job["status"] == "queued" and len(pending) == 1


def test_after_the_first_failed_send_the_rest_wait_for_the_sweeper(settings, db, tenant, caplog):
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    app = create_app(settings.model_copy(update={"redis_url": nowhere, "batch_chunk_size": 2}))
    items = [{"content": f"chunked while the broker is down {i}"} for i in range(10)]
    with TestClient(app) as client, caplog.at_level("WARNING", logger="mnemoflow.gateway"):
        before = enqueue_failures()
        batch = client.post("/memory/batch", json={"items": items, "user_id": tenant})
        assert enqueue_failures() - before == 5  # every unsent message counted
    assert batch.status_code == 202, batch.text
    tries = [r for r in caplog.records if r.getMessage().startswith("could not enqueue")]
    assert len(tries) == 1 and "5 message(s) left" in tries[0].getMessage()  # one try, not one per chunk
    with db.session() as s:
        assert len(job_store.pending_chunks(s, uuid.UUID(batch.json()["job_id"]))) == 5
