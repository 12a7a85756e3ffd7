"""A document past MNEMOFLOW_INGEST_MAX_CHARS or MNEMOFLOW_INGEST_MAX_CHUNKS fails its job with the limit named,
through a real gateway and a real ingest worker, and stores nothing; a document within them is stored whole."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from infra.embedded import free_port
from infra.processes import gateway_command, wait_for_worker, wait_healthy
from shared.config import Settings
from tests.conftest import running, service_env, wait_for_job, worker_args
from tests.unit.ingest import samples

pytestmark = pytest.mark.e2e

MAX_CHARS, MAX_CHUNKS = 20_000, 5


@pytest.fixture(scope="module")
def capped(servers, tmp_path_factory) -> Iterator[str]:
    """A gateway and a worker with small document limits, on a broker of their own (another Redis database), so
    the suite's other worker never takes their jobs."""
    redis_url = servers["redis_url"].rsplit("/", 1)[0] + "/7"
    env = service_env(
        servers,
        REDIS_URL=redis_url,
        MNEMOFLOW_INGEST_MAX_CHARS=str(MAX_CHARS),
        MNEMOFLOW_INGEST_MAX_CHUNKS=str(MAX_CHUNKS),
    )
    settings = Settings(database_url=servers["database_url"], redis_url=redis_url, environment="test")
    logs = tmp_path_factory.mktemp("capped-logs")
    with running(worker_args("tests-capped"), env, logs / "worker.log") as worker:
        wait_for_worker(settings, "tests-capped", worker, log_path=logs / "worker.log")
        port = free_port()
        with running(gateway_command(host="127.0.0.1", port=port), env, logs / "gateway.log") as gateway:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url, gateway, log_path=logs / "gateway.log")
            yield url


@pytest.fixture
def client(capped) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=capped, timeout=30) as http:
        yield http


def _ingest(client: httpx.Client, path: Path, tenant: str, **fields: str) -> tuple[dict, dict]:
    with open(path, "rb") as handle:
        accepted = client.post(
            "/memory/ingest/file", files={"file": (path.name, handle)}, data={"user_id": tenant, **fields}
        )
    assert accepted.status_code in (200, 202), accepted.text
    job = wait_for_job(client, accepted.json()["job_id"], tenant)
    document = client.get(f"/documents/{accepted.json()['document_id']}", params={"user_id": tenant}).json()
    return job, document


def _memories(db, tenant: str) -> int:
    with db.session(tenant) as session:
        return session.execute(text("SELECT count(*) FROM memories WHERE user_id = :u"), {"u": tenant}).scalar_one()


def test_a_document_with_more_text_than_the_limit_fails_once_saying_so(client, db, tenant, tmp_path):
    long_pdf = samples.pdf(tmp_path / "long.pdf", pages=30, paragraphs_per_page=5)  # ~27,000 characters
    bomb = samples.text_bomb_pdf(tmp_path / "bomb.pdf", pages=100)  # ~80 million characters in ~20 KB
    assert bomb.stat().st_size < 64 * 1024
    for document_file in (long_pdf, bomb):
        job, document = _ingest(client, document_file, tenant)
        assert job["status"] == "failed" and job["attempts"] == 1, job  # bad input: not retried
        expected = f"more than {MAX_CHARS:,} characters of text, the limit per document (MNEMOFLOW_INGEST_MAX_CHARS)"
        assert expected in job["error"] and expected in document["error"]
        assert document["status"] == "failed" and document["chunk_count"] == 0
    assert _memories(db, tenant) == 0


def test_a_document_cut_into_more_chunks_than_the_limit_fails_naming_the_chunk_size(client, db, tenant, tmp_path):
    pdf = samples.pdf(tmp_path / "notes.pdf", pages=8, paragraphs_per_page=5)  # ~7,000 characters
    job, document = _ingest(client, pdf, tenant, chunk_size="64")
    assert job["status"] == "failed" and job["attempts"] == 1, job
    assert f"more than {MAX_CHUNKS} chunks of 64 tokens" in job["error"]
    assert "MNEMOFLOW_INGEST_MAX_CHUNKS" in job["error"] and "config.chunk_size" in document["error"]
    assert _memories(db, tenant) == 0

    job, document = _ingest(client, pdf, f"{tenant}-whole")  # the same text in default chunks fits
    assert job["status"] == "succeeded", job
    assert document["status"] == "done" and 1 <= document["chunk_count"] <= MAX_CHUNKS
    assert _memories(db, f"{tenant}-whole") == document["chunk_count"]
