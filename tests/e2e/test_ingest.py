"""Documents, web pages and speech through the whole stack: gateway → ingest worker → sector queues → memories."""

from __future__ import annotations

import base64
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from tests.conftest import wait_for_job
from tests.unit.ingest import samples

pytestmark = pytest.mark.e2e

TRUSTED_HOST = "127.0.0.2"  # MNEMOFLOW_INGEST_ALLOWED_NETWORKS of the test stack (tests/conftest.py)


class _Site(BaseHTTPRequestHandler):
    """/article (an HTML page), /redirect?to=URL."""

    def log_message(self, *_args: object) -> None:
        pass

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        if path == "/article":
            body = samples.ARTICLE_HTML.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif path == "/redirect":
            self.send_response(302)
            self.send_header("Location", query.removeprefix("to="))
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self.send_error(404)


def _serve(host: str) -> Iterator[str]:
    server = ThreadingHTTPServer((host, 0), _Site)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def trusted_site() -> Iterator[str]:
    yield from _serve(TRUSTED_HOST)


@pytest.fixture(scope="module")
def loopback_site() -> Iterator[str]:
    yield from _serve("127.0.0.1")


def upload(http: httpx.Client, path: Path, tenant: str, **fields: str) -> httpx.Response:
    with open(path, "rb") as handle:
        return http.post(
            "/memory/ingest/file",
            files={"file": (path.name, handle, fields.pop("part_type", "application/octet-stream"))},
            data={"user_id": tenant, **fields},
        )


def ingested(http: httpx.Client, accepted: httpx.Response, tenant: str) -> tuple[dict, dict]:
    """The finished job and the document of an accepted ingest request."""
    assert accepted.status_code in (200, 202), accepted.text
    body = accepted.json()
    job = wait_for_job(http, body["job_id"], tenant)
    document = http.get(f"/documents/{body['document_id']}", params={"user_id": tenant}).json()
    return job, document


def memories_of(http: httpx.Client, document: dict, tenant: str) -> list[dict]:
    return [http.get(f"/memory/{m['id']}", params={"user_id": tenant}).json() for m in document["memories"]]


def reading_order(db, document_id: str) -> list[tuple[int, int]]:
    with db.session() as s:
        rows = s.execute(
            text(
                "SELECT a.chunk_index, b.chunk_index FROM waypoints w JOIN memories a ON a.id = w.src_id "
                "JOIN memories b ON b.id = w.dst_id WHERE w.kind = 'next' AND a.document_id = :d ORDER BY 1"
            ),
            {"d": document_id},
        ).all()
    return [(r[0], r[1]) for r in rows]


def counts(db, tenant: str) -> dict[str, int]:
    with db.session(tenant) as s:
        return {
            table: s.execute(text(f"SELECT count(*) FROM {table} WHERE user_id = :u"), {"u": tenant}).scalar_one()
            for table in ("documents", "jobs", "memories")
        }


def query(http: httpx.Client, phrase: str, tenant: str) -> list[dict]:
    body = {"query": phrase, "user_id": tenant, "k": 5, "filters": {"min_score": 0}}
    return http.post("/memory/query", json=body).json()["matches"]


def test_a_multi_page_pdf_becomes_linked_page_numbered_memories_once(http, db, worker, tenant, tmp_path):
    pdf = samples.pdf(tmp_path / "colony.pdf", pages=4, paragraphs_per_page=3)
    accepted = upload(
        http,
        pdf,
        tenant,
        chunk_size="128",
        chunk_overlap="16",
        metadata='{"project": "herons"}',
        occurred_at="2024-06-01",
    )
    assert accepted.status_code == 202 and accepted.json()["status"] == "queued"
    assert accepted.json()["format"] == "pdf" and accepted.headers["location"].startswith("/documents/")
    job, document = ingested(http, accepted, tenant)
    assert job["status"] == "succeeded", job
    assert job["kind"] == "ingest" and job["progress"]["done"] == job["progress"]["total"] == document["chunk_count"]
    assert job["result"]["phase"] == "done" and {"extract_ms", "chunk_ms", "embed_ms", "store_ms"} <= set(
        job["result"]["stages_ms"]
    )
    assert document["status"] == "done" and document["format"] == "pdf" and document["filename"] == "colony.pdf"
    assert document["extracted"]["page_count"] == 4 and document["metadata"] == {"project": "herons"}
    n = document["chunk_count"]
    assert n >= 3 and document["memories_total"] == n
    assert [m["chunk_index"] for m in document["memories"]] == list(range(n))
    memories = memories_of(http, document, tenant)
    pages = [m["metadata"]["chunk"]["page_numbers"] for m in memories]
    assert pages[0][0] == 1 and pages[-1][-1] == 4 and all(p == sorted(p) for p in pages)
    assert all(m["metadata"]["project"] == "herons" and m["document_id"] == document["id"] for m in memories)
    assert {m["occurred_at"] for m in memories} == {"2024-06-01T00:00:00Z"}
    assert memories[0]["metadata"]["source"] == {
        "document_id": document["id"],
        "type": "upload",
        "format": "pdf",
        "filename": "colony.pdf",
    }
    assert reading_order(db, document["id"]) == [(i, i + 1) for i in range(n - 1)]
    hits = query(http, "volunteers count nests in the alder trees ledger", tenant)
    assert hits and hits[0]["metadata"]["source"]["document_id"] == document["id"]

    before = counts(db, tenant)
    again = upload(http, pdf, tenant, chunk_size="128", chunk_overlap="16")
    assert again.status_code == 200 and again.json()["status"] == "existing"
    assert again.json()["document_id"] == document["id"] and again.json()["job_id"] == job["id"]
    assert counts(db, tenant) == before
    page = http.get(f"/documents/{document['id']}", params={"user_id": tenant, "offset": 1, "limit": 2}).json()
    assert [m["chunk_index"] for m in page["memories"]] == [1, 2] and page["memories_total"] == n
    listed = http.get("/documents", params={"user_id": tenant}).json()
    assert listed["total"] == 1 and listed["items"][0]["id"] == document["id"]


def test_a_docx_in_openmemory_json_shape_keeps_its_headings(http, worker, tenant, tmp_path):
    docx = samples.docx_file(tmp_path / "report.docx", sections=3)
    body = {
        "content_type": "docx",
        "data": base64.b64encode(docx.read_bytes()).decode(),
        "metadata": {"kind": "report"},
        "config": {"chunk_size": 64, "chunk_overlap": 8, "preserve_metadata": True},
        "user_id": tenant,
        "filename": "report.docx",
    }
    accepted = http.post("/memory/ingest", json=body, params={"wait": "true"})
    assert accepted.status_code == 200 and accepted.json()["job"]["status"] == "succeeded", accepted.text
    _, document = ingested(http, accepted, tenant)
    assert document["status"] == "done" and document["format"] == "docx" and document["chunk_count"] >= 2
    memories = memories_of(http, document, tenant)
    headings = [m["metadata"]["chunk"]["headings"] for m in memories]
    assert ["Annual Report", "Section 2"] in headings
    assert all(m["metadata"]["document"]["title"] == "Annual Report" for m in memories)


def test_a_document_s_time_is_on_every_chunk_and_anchors_queries_naming_it(http, worker, tenant):
    body = {"content_type": "txt", "data": samples.PLAIN_TEXT, "user_id": tenant, "config": {"chunk_size": 16}}
    dated = http.post("/memory/ingest", json=body | {"occurred_at": "2023-05-08T01:30:00+02:00"}, params={"wait": True})
    job, document = ingested(http, dated, tenant)
    assert job["status"] == "succeeded" and document["chunk_count"] >= 2, job["error"]
    memories = memories_of(http, document, tenant)
    assert {m["occurred_at"] for m in memories} == {"2023-05-07T23:30:00Z"}  # in UTC, as every time is returned

    asked = {"query": "herons counted near the mill in May 2023", "user_id": tenant, "k": 5, "explain": True}
    matches = http.post("/memory/query", json=asked | {"filters": {"min_score": 0}}).json()["matches"]
    anchored = [m for m in matches if m["trace"]["components"].get("period")]
    assert anchored and {m["occurred_at"] for m in anchored} == {"2023-05-07T23:30:00Z"}
    assert sorted(m["trace"]["period_rank"] for m in anchored) == list(range(1, len(anchored) + 1))


def test_a_web_page_by_url_and_refusals_of_private_addresses(http, db, worker, tenant, trusted_site, loopback_site):
    accepted = http.post("/memory/ingest/url", json={"url": f"{trusted_site}/article#top", "user_id": tenant})
    assert accepted.status_code == 202, accepted.text
    job, document = ingested(http, accepted, tenant)
    assert job["status"] == "succeeded", job
    assert document["status"] == "done" and document["format"] == "html" and document["source_type"] == "url"
    assert document["source_uri"] == f"{trusted_site}/article"  # normalised: no fragment
    assert document["extracted"]["title"].endswith("The Heron Migration")
    memories = memories_of(http, document, tenant)
    assert memories[0]["metadata"]["source"]["url"] == f"{trusted_site}/article"
    assert all("Subscribe" not in m["content"] for m in memories)  # the sidebar is not the article
    assert query(http, "grey herons return to the marshes", tenant)[0]["document_id"] == document["id"]
    again = http.post("/memory/ingest/url", json={"url": f"{trusted_site.upper()}/article", "user_id": tenant})
    assert again.json()["status"] == "existing" and again.json()["document_id"] == document["id"]

    direct = http.post("/memory/ingest/url", json={"url": f"{loopback_site}/article", "user_id": tenant})
    assert direct.status_code == 422 and "loopback" in direct.json()["error"]["message"]
    for bad, fragment in (("ftp://example.org/x", "only http and https"), ("http://user:pw@example.org/", "password")):
        refused = http.post("/memory/ingest/url", json={"url": bad, "user_id": tenant})
        assert refused.status_code == 422 and fragment in refused.json()["error"]["message"]

    sneaky = f"{trusted_site}/redirect?to={loopback_site}/article"
    job, document = ingested(http, http.post("/memory/ingest/url", json={"url": sneaky, "user_id": tenant}), tenant)
    assert job["status"] == "failed" and job["attempts"] == 1
    assert "refused to fetch" in job["error"] and "loopback" in job["error"]
    assert document["status"] == "failed" and "loopback" in document["error"] and document["memories_total"] == 0


def test_speech_is_transcribed_into_timestamped_memories(http, worker, tenant, tmp_path):
    clip = samples.speech_wav(tmp_path / "note.wav")
    job, document = ingested(http, upload(http, clip, tenant, part_type="audio/wav"), tenant)
    assert job["status"] == "succeeded", job
    assert document["format"] == "wav" and document["extracted"]["duration_s"] > 2
    (memory,) = memories_of(http, document, tenant)
    assert "remember documents" in memory["content"].lower()  # tiny.en hears eSpeak's "brown fox" variously
    chunk = memory["metadata"]["chunk"]
    assert 0 <= chunk["start"] < chunk["end"] <= document["extracted"]["duration_s"] + 1
    assert query(http, "memory engines remember documents", tenant)[0]["document_id"] == document["id"]


def test_a_corrupt_file_fails_its_job_once_with_the_error_and_stores_nothing(http, db, worker, tenant, tmp_path):
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog >> garbage without xref or trailer")
    job, document = ingested(http, upload(http, broken, tenant), tenant)
    assert job["status"] == "failed" and job["attempts"] == 1 and "not a readable PDF" in job["error"]
    assert document["status"] == "failed" and "not a readable PDF" in document["error"]
    assert counts(db, tenant)["memories"] == 0
    with db.session() as s:  # the staged bytes are gone with the attempt
        staged = s.execute(
            text("SELECT count(*) FROM document_uploads WHERE document_id = :d"), {"d": document["id"]}
        ).scalar_one()
    assert staged == 0


def test_bad_uploads_are_refused_before_anything_is_written(http, db, tenant, tmp_path):
    pdf = samples.pdf(tmp_path / "a.pdf", pages=1)
    oversize = tmp_path / "big.txt"
    oversize.write_bytes(b"word " * (2 * 1024 * 1024 // 5 + 10_000))  # over the test stack's 2 MiB
    cases = [
        (upload(http, oversize, tenant), 413, "MNEMOFLOW_INGEST_MAX_BYTES"),
        (upload(http, pdf, tenant, content_type="text/html"), 415, "declared as text/html but the content is pdf"),
        (upload(http, pdf, tenant, part_type="image/png"), 415, "declared as image/png"),
        (
            http.post("/memory/ingest", json={"content_type": "docx", "data": "plain words", "user_id": tenant}),
            422,
            "not valid base64",
        ),
        (
            http.post(
                "/memory/ingest",
                json={"content_type": "docx", "data": base64.b64encode(b"plain words").decode(), "user_id": tenant},
            ),
            415,
            "the content is txt",
        ),
        (
            http.post(
                "/memory/ingest",
                json={"content_type": "pdf", "data": base64.b64encode(b"\x00\x01" * 500).decode(), "user_id": tenant},
            ),
            415,
            "unsupported content",
        ),
        (
            http.post(
                "/memory/ingest",
                json={"content_type": "txt", "data": "x " * (1024 * 1024 + 10), "user_id": tenant},
            ),
            413,
            "limit",
        ),
        (http.post("/memory/ingest", json={"content_type": "exe", "data": "x", "user_id": tenant}), 415, "exe"),
        (
            http.post("/memory/ingest/file", data={"user_id": tenant}, files={"other": ("a", b"x")}),
            422,
            "named 'file'",
        ),
        (upload(http, pdf, tenant, chunk_size="64", chunk_overlap="64"), 422, "chunk_overlap"),
        (upload(http, pdf, tenant, occurred_at="last spring"), 422, "occurred_at"),
        (upload(http, pdf, tenant, chunk_overlap="3000"), 422, "below the chunk size (2048, the server default)"),
        (
            http.post(
                "/memory/ingest",
                json={"content_type": "txt", "data": "words", "user_id": tenant, "occurred_at": "2023-02-30"},
            ),
            422,
            "occurred_at",
        ),
    ]
    for response, status, fragment in cases:
        assert response.status_code == status, response.text
        assert fragment in response.json()["error"]["message"], response.text
    assert counts(db, tenant) == {"documents": 0, "jobs": 0, "memories": 0}


def test_unknown_and_foreign_documents_are_not_found(http, worker, tenant):
    unknown = http.get(f"/documents/{uuid.uuid4()}", params={"user_id": tenant})
    assert unknown.status_code == 404 and "not found" in unknown.json()["error"]["message"]
    body = {"content_type": "txt", "data": samples.PLAIN_TEXT, "user_id": tenant}
    accepted = http.post("/memory/ingest", json=body, params={"wait": "true"}).json()
    assert accepted["job"]["status"] == "succeeded"
    foreign = http.get(f"/documents/{accepted['document_id']}", params={"user_id": f"{tenant}-other"})
    assert foreign.status_code == 404
    assert http.get("/documents", params={"user_id": f"{tenant}-other"}).json()["total"] == 0
    assert http.get("/documents/not-a-uuid").status_code == 422
    metrics = http.get("/metrics").text
    assert 'mnemoflow_documents_accepted_total{format="txt",outcome="queued"}' in metrics
    assert 'mnemoflow_documents{format="txt",status="done"}' in metrics


def test_the_cli_ingests_a_file_and_waits_for_it(gateway, worker, tenant, tmp_path):
    from typer.testing import CliRunner

    from services.cli.main import app

    notes = tmp_path / "notes.md"
    notes.write_text(samples.MARKDOWN)
    runner = CliRunner()
    assert "--wait" in runner.invoke(app, ["ingest", "--help"]).output
    result = runner.invoke(
        app,
        ["ingest", str(notes), "--user", tenant, "--wait", "--meta", "trip=marsh", "--occurred-at", "2023-05-08"],
        env={"MNEMOFLOW_URL": gateway},
    )
    assert result.exit_code == 0, result.output
    assert "done: md" in result.output and "memories" in result.output
    stored = httpx.get(f"{gateway}/memory/all", params={"user_id": tenant}).json()["items"]
    assert stored and {m["occurred_at"] for m in stored} == {"2023-05-08T00:00:00Z"}
    again = runner.invoke(app, ["ingest", str(notes), "--user", tenant], env={"MNEMOFLOW_URL": gateway})
    assert "already ingested" in again.output
    missing = runner.invoke(app, ["ingest", str(tmp_path / "nope.pdf")], env={"MNEMOFLOW_URL": gateway})
    assert missing.exit_code == 2 and "no such file" in missing.output
