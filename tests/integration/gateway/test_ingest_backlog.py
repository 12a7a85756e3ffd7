"""A tenant's backlog of documents (MNEMOFLOW_INGEST_MAX_QUEUED): past it a new document is refused 429 with
Retry-After and a message naming the setting, writing nothing; a document asked for again is still answered,
another tenant is not held, and a place that frees up is taken again.

No worker takes this module's documents: the waiting jobs are written directly and never sent, and the gateway
sends to a broker database no worker reads (the session's worker would otherwise ingest them in the background,
under the next module's store-wide counts). At the end their jobs are cancelled, so no sweeper sends them again."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from sqlalchemy import text

from services.gateway.app import create_app
from shared.jobs import JobKind
from shared.storage import jobs as job_store

pytestmark = pytest.mark.integration

MAX_QUEUED = 2
UNREAD_BROKER = 9  # a Redis database no worker of the test session consumes


@pytest.fixture
def held(settings, maintenance):
    """The gateway's settings with a backlog of MAX_QUEUED and a broker no worker reads; the jobs the module's
    tenants leave open are cancelled afterwards."""
    tenants: list[str] = []
    broker = settings.redis_url.rsplit("/", 1)[0] + f"/{UNREAD_BROKER}"
    yield (
        tenants,
        settings.model_copy(
            update={"ingest_max_queued": MAX_QUEUED, "ingest_allow_private_urls": True, "redis_url": broker}
        ),
    )
    with maintenance.session() as session:
        session.execute(
            text("UPDATE jobs SET status = 'cancelled' WHERE user_id = ANY(:t) AND status IN ('queued', 'running')"),
            {"t": tenants},
        )


def waiting_job(db, tenant: str) -> uuid.UUID:
    """An open ingest job of the tenant's that no worker will take (no message is sent for it)."""
    with db.session() as session:
        job_id, _ = job_store.create_job(
            session, user_id=tenant, kind=JobKind.INGEST, total=0, params={}, idempotency_key=None
        )
    return job_id


def documents_of(db) -> int:
    with db.session() as session:
        return int(session.execute(text("SELECT count(*) FROM documents")).scalar_one())


def refused_for_backlog() -> float:
    return REGISTRY.get_sample_value("mnemoflow_rate_limited_total", {"quota": "queued_documents"}) or 0.0


def note(text_: str, tenant: str) -> dict[str, str]:
    return {"data": text_, "content_type": "txt", "user_id": tenant}


def test_a_full_backlog_refuses_new_documents_with_429_and_writes_nothing(held, db, tenant):
    tenants, settings = held
    other = f"t-{uuid.uuid4().hex[:12]}"
    tenants += [tenant, other]
    with TestClient(create_app(settings)) as client:
        accepted = client.post("/memory/ingest", json=note("the ferry timetable changes in May", tenant))
        assert accepted.status_code in (200, 202), accepted.text
        first = accepted.json()
        waiting_job(db, tenant)
        waiting_job(db, tenant)  # with the first, three waiting: the backlog is full
        before, counted = documents_of(db), refused_for_backlog()

        refused = client.post("/memory/ingest", json=note("the harbour master retires in June", tenant))
        assert refused.status_code == 429, refused.text
        assert refused.headers["Retry-After"] == "5"
        error = refused.json()["error"]
        assert error["code"] == "rate_limited" and "MNEMOFLOW_INGEST_MAX_QUEUED" in error["message"]
        assert "documents waiting to be ingested" in error["message"]
        assert error["details"]["limit"] == "queued_documents" and error["details"]["max_queued"] == MAX_QUEUED
        url = client.post("/memory/ingest/url", json={"url": "http://127.0.0.1:9/minutes", "user_id": tenant})
        assert url.status_code == 429, url.text
        upload = client.post(
            "/memory/ingest/file",
            files={"file": ("minutes.txt", b"the quay is closed on Sundays", "text/plain")},
            data={"user_id": tenant},
        )
        assert upload.status_code == 429, upload.text
        assert documents_of(db) == before  # refused: no document, no job, no staged bytes
        assert refused_for_backlog() == counted + 3

        again = client.post("/memory/ingest", json=note("the ferry timetable changes in May", tenant))
        assert again.status_code in (200, 202), again.text  # known already: nothing new to queue
        assert again.json()["document_id"] == first["document_id"] and again.json()["status"] == "existing"

        elsewhere = client.post("/memory/ingest", json=note("the harbour master retires in June", other))
        assert elsewhere.status_code in (200, 202), elsewhere.text  # another tenant's backlog is its own


def test_a_place_freed_in_the_backlog_is_taken_again(held, db, tenant):
    tenants, settings = held
    tenants.append(tenant)
    jobs = [waiting_job(db, tenant) for _ in range(MAX_QUEUED)]
    with TestClient(create_app(settings)) as client:
        assert client.post("/memory/ingest", json=note("the lighthouse is repainted", tenant)).status_code == 429
        with db.session() as session:
            job_store.finish_job(session, jobs[0], status="failed", error="given up by the test")
        accepted = client.post("/memory/ingest", json=note("the lighthouse is repainted", tenant))
        assert accepted.status_code in (200, 202), accepted.text
        assert accepted.json()["status"] == "queued"
