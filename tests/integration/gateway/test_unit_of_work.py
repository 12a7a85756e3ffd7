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


def test_with_the_broker_down_committed_work_is_answered_202_and_left_to_the_sweeper(settings, db, tenant):
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
    with db.session() as s:
        run = decay_runs.get_run(s, uuid.UUID(decay.json()["id"]))
        job = job_store.get_job(s, uuid.UUID(batch.json()["job_id"]))
        pending = job_store.pending_chunks(s, uuid.UUID(batch.json()["job_id"]))
    assert run is not None and run["status"] == "queued"  # committed: the sweeper sends it (tests: worker pipeline)
    assert job is not None and job["status"] == "queued" and len(pending) == 1
