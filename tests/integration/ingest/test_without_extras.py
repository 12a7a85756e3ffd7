"""A gateway and an ingest worker installed without the optional extras (`mnemoflow[documents]`, `mnemoflow[audio]`),
as real processes that cannot import those packages (tests/without_extras/sitecustomize.py): the gateway refuses
office and audio uploads with 415 naming the extra, and accepts Markdown; the worker reads the Markdown with the
built-in parser, in its sandbox, and fails a recording it cannot read with the `pip install` that fixes it."""

from __future__ import annotations

import hashlib
import io
import uuid
from pathlib import Path

import httpx
import pytest
import redis

from infra.embedded import free_port
from infra.processes import gateway_command, wait_healthy
from shared.ingest import Format, intake
from shared.ingest.extras import MODULES, Extra
from shared.jobs import IngestDocument
from shared.queueing import make_celery, send
from tests.conftest import ROOT, running, service_env, wait_for_worker, worker_args
from tests.integration.helpers import wait_until
from tests.unit.ingest import samples

pytestmark = pytest.mark.integration

BLOCKED = ",".join((*MODULES[Extra.DOCUMENTS], *MODULES[Extra.AUDIO]))


def upload(gateway: str, name: str, data: bytes, tenant: str) -> httpx.Response:
    return httpx.post(
        f"{gateway}/memory/ingest/file", files={"file": (name, data)}, data={"user_id": tenant}, timeout=30
    )


def document(gateway: str, document_id: str, tenant: str) -> dict:
    return httpx.get(f"{gateway}/documents/{document_id}", params={"user_id": tenant}, timeout=10).json()


def test_a_stack_without_the_extras_refuses_what_it_cannot_read_and_reads_the_rest(
    db, servers, settings, tenant, tmp_path: Path
) -> None:
    broker = servers["redis_url"].rsplit("/", 1)[0] + "/10"  # a broker database of its own: only its worker reads it
    redis.Redis.from_url(broker).flushdb()
    isolated = settings.model_copy(update={"redis_url": broker})
    env = service_env(
        servers,
        REDIS_URL=broker,
        PYTHONPATH=str(ROOT / "tests" / "without_extras"),
        MNEMOFLOW_TEST_BLOCKED_MODULES=BLOCKED,
    )
    port, name = free_port(), f"noextras-{uuid.uuid4().hex[:6]}"
    gateway = f"http://127.0.0.1:{port}"
    wav = samples.tone_wav(tmp_path / "tone.wav", seconds=0.5).read_bytes()
    deck = samples.pptx_file(tmp_path / "deck.pptx").read_bytes()
    docx = samples.docx_file(tmp_path / "report.docx").read_bytes()
    app = make_celery(isolated, "tests.noextras")
    try:
        with (
            running(gateway_command(host="127.0.0.1", port=port), env, tmp_path / "gateway.log") as gateway_proc,
            running(worker_args(name), env, tmp_path / "worker.log") as worker_proc,
        ):
            wait_healthy(gateway, gateway_proc, log_path=tmp_path / "gateway.log")
            for filename, data, extra in (("tone.wav", wav, "audio"), ("deck.pptx", deck, "documents")):
                refused = upload(gateway, filename, data, tenant)
                assert refused.status_code == 415, refused.text
                assert f"pip install 'mnemoflow[{extra}]'" in refused.json()["error"]["message"]

            accepted = upload(gateway, "guide.md", samples.MARKDOWN.encode(), tenant)
            assert accepted.status_code == 202, accepted.text
            markdown_id = accepted.json()["document_id"]
            accepted = upload(gateway, "report.docx", docx, tenant)  # DOCX is in the base install (python-docx)
            assert accepted.status_code == 202, accepted.text
            docx_id = accepted.json()["document_id"]

            # A recording the gateway let through (one with the audio extra, say) reaches this worker.
            with db.session() as session:
                recording = intake.accept_upload(
                    session,
                    user_id=tenant,
                    source=io.BytesIO(wav),
                    digest=hashlib.sha256(wav).hexdigest(),
                    size=len(wav),
                    fmt=Format.WAV,
                    filename="tone.wav",
                    declared_type="audio/wav",
                    params={},
                )
            assert recording.job_id is not None
            wait_for_worker(isolated, name, worker_proc, log_path=tmp_path / "worker.log")
            send(app, IngestDocument(job_id=recording.job_id, user_id=tenant))

            read = wait_until(
                lambda: (d := document(gateway, markdown_id, tenant))["status"] in ("done", "failed") and d,
                timeout=120,
            )
            report = wait_until(
                lambda: (d := document(gateway, docx_id, tenant))["status"] in ("done", "failed") and d, timeout=120
            )
            failed = wait_until(
                lambda: (d := document(gateway, str(recording.document_id), tenant))["status"] == "failed" and d
            )
    finally:
        app.close()
    assert read["status"] == "done", read["error"]
    assert read["chunk_count"] >= 1 and read["memories_total"] == read["chunk_count"]
    assert read["extracted"]["title"] == "Field Guide"
    assert "languages" not in read["extracted"]  # unstructured would have detected English: the built-in parser read it
    assert "pip install 'mnemoflow[audio]'" in failed["error"]
    assert report["status"] == "done", report["error"]
    assert report["extracted"]["title"] == "Annual Report"
