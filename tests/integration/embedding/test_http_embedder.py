"""HTTP embedding providers against a real HTTP server on loopback (not a mock object)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import numpy as np
import pytest

from shared.config import Settings
from shared.embedding import SyntheticEmbedder
from shared.embedding.factory import create_embedder
from shared.embedding.http import DimensionMismatch, EmbeddingServiceError, HttpEmbedder
from shared.jobs import ChunkSpec
from shared.memory.chunks import store_chunk
from shared.text import estimate_tokens

pytestmark = pytest.mark.integration
REFERENCE = SyntheticEmbedder(dim=32)


class EmbeddingServer(BaseHTTPRequestHandler):
    """Speaks OpenAI's /v1/embeddings and Ollama's /api/embed; fails on command."""

    fail_next: list[int] = []
    requests: list[dict] = []
    dim = 32

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).requests.append({"path": self.path, "auth": self.headers.get("authorization"), **body})
        if self.headers.get("authorization") == "Bearer wrong":
            return self._send(401, {"error": {"message": "Incorrect API key provided"}})
        if type(self).fail_next:
            return self._send(type(self).fail_next.pop(0), {"error": {"message": "try again"}})
        vectors = SyntheticEmbedder(dim=type(self).dim).embed(body["input"]).tolist()
        if self.path == "/v1/embeddings":
            data = [{"index": i, "embedding": v} for i, v in enumerate(vectors)]
            return self._send(200, {"data": data[::-1], "model": body["model"]})  # out of order on purpose
        if self.path == "/api/embed":
            return self._send(200, {"embeddings": vectors})
        return self._send(404, {"error": "no such route"})

    def _send(self, status: int, payload: dict) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    EmbeddingServer.fail_next, EmbeddingServer.requests, EmbeddingServer.dim = [], [], 32
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), EmbeddingServer)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_openai_compatible_endpoint_in_batches_and_in_order(server):
    texts = [f"sentence number {i}" for i in range(5)]
    embedder = HttpEmbedder(api="openai", base_url=server, model="m", dim=32, api_key="sk-test", batch_size=2)
    np.testing.assert_allclose(embedder.embed(texts), REFERENCE.embed(texts), atol=1e-6)
    assert [len(r["input"]) for r in EmbeddingServer.requests] == [2, 2, 1]
    assert EmbeddingServer.requests[0]["auth"] == "Bearer sk-test" and EmbeddingServer.requests[0]["model"] == "m"


def test_long_texts_are_sent_as_overlapping_windows_and_mean_pooled(server):
    long_text = " ".join(f"clause{i} of the contract" for i in range(400))  # ~2,000 estimated tokens
    embedder = HttpEmbedder(api="openai", base_url=server, model="m", dim=32, window_tokens=512, overlap_tokens=50)
    (pooled,) = embedder.embed([long_text])
    (sent,) = [r["input"] for r in EmbeddingServer.requests]
    assert len(sent) >= 4 and all(estimate_tokens(w) <= 520 for w in sent)
    expected = REFERENCE.embed(sent).mean(axis=0)
    np.testing.assert_allclose(pooled, expected / np.linalg.norm(expected), atol=1e-6)


def test_settings_require_the_dimension_of_an_http_model(server):
    with pytest.raises(ValueError, match="needs MNEMOFLOW_VECTOR_DIM"):
        create_embedder(Settings(embedding_provider="openai", openai_base_url=server))


def test_ollama_native_endpoint(server):
    embedder = HttpEmbedder(api="ollama", base_url=server, model="nomic-embed-text", dim=32)
    np.testing.assert_allclose(embedder.embed(["hello there"]), REFERENCE.embed(["hello there"]), atol=1e-6)
    assert EmbeddingServer.requests[0]["path"] == "/api/embed"


def test_overload_and_server_errors_are_retried(server):
    EmbeddingServer.fail_next = [429, 503]
    embedder = HttpEmbedder(api="openai", base_url=server, model="m", dim=32, backoff_seconds=0.01)
    assert embedder.embed(["eventually"]).shape == (1, 32)
    assert len(EmbeddingServer.requests) == 3


def test_client_errors_fail_at_once_with_the_servers_message(server):
    embedder = HttpEmbedder(api="openai", base_url=server, model="m", dim=32, api_key="wrong", backoff_seconds=0.01)
    with pytest.raises(EmbeddingServiceError, match="401: Incorrect API key provided") as caught:
        embedder.embed(["x"])
    assert not caught.value.retryable and len(EmbeddingServer.requests) == 1


def test_giving_up_after_the_configured_attempts(server):
    EmbeddingServer.fail_next = [500] * 10
    embedder = HttpEmbedder(api="openai", base_url=server, model="m", dim=32, max_attempts=3, backoff_seconds=0.01)
    with pytest.raises(EmbeddingServiceError, match="500"):
        embedder.embed(["x"])
    assert len(EmbeddingServer.requests) == 3


def test_a_dimension_mismatch_is_explained(server):
    EmbeddingServer.dim = 48
    embedder = HttpEmbedder(api="openai", base_url=server, model="m", dim=32)
    with pytest.raises(DimensionMismatch, match="MNEMOFLOW_VECTOR_DIM=48") as caught:
        embedder.embed(["x"])
    assert (caught.value.answered, caught.value.expected) == (48, 32) and not caught.value.retryable


def test_settings_select_the_provider_and_keep_the_key_secret(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret")
    settings = Settings(embedding_provider="openai", openai_base_url=server, vector_dim=32)
    assert "sk-very-secret" not in repr(settings)
    embedder = create_embedder(settings)
    assert (embedder.name, embedder.model, embedder.dim) == ("openai", "text-embedding-3-small", 32)
    embedder.embed(["hi"])
    assert EmbeddingServer.requests[-1]["auth"] == "Bearer sk-very-secret"


def test_a_failing_provider_leaves_the_chunk_retryable_and_writes_nothing(db, settings, tenant):
    from sqlalchemy import text

    from infra.embedded import free_port
    from shared.embedding.calls import EmbeddingFailed
    from shared.memory.engine import MemoryEngine
    from shared.storage import jobs as job_store

    dead = HttpEmbedder(
        api="openai",
        base_url=f"http://127.0.0.1:{free_port()}",
        model="m",
        dim=384,
        max_attempts=2,
        backoff_seconds=0.01,
    )
    engine = MemoryEngine(settings, dead)
    with db.session() as s:
        job_id, _ = job_store.create_job(s, user_id=tenant, kind="batch", total=3, params={}, idempotency_key=None)
        job_store.add_chunks(s, job_id, [ChunkSpec(0, "semantic", [{"content": f"n{i}"} for i in range(3)])])
    with pytest.raises(EmbeddingFailed, match="openai embedding of 3 texts failed") as caught, db.session() as s:
        store_chunk(engine, s, job_id, 0)
    assert (caught.value.call.provider, caught.value.call.item_count, caught.value.call.status) == (
        "openai",
        3,
        "failed",
    )
    assert "ConnectError" in (caught.value.call.error or "")
    with db.session() as s:
        assert s.execute(text("SELECT count(*) FROM memories WHERE user_id = :u"), {"u": tenant}).scalar_one() == 0
        assert job_store.pending_chunks(s, job_id)  # still pending: the next attempt can do it


def test_a_dead_provider_is_a_503_that_writes_nothing_and_is_logged(make_store, servers, tmp_path):
    from sqlalchemy import text

    from infra.embedded import free_port
    from infra.processes import gateway_command, wait_healthy
    from shared.tenancy import DbRole
    from tests.conftest import running, service_env

    url, db = make_store("dead_provider", role=DbRole.MAINTENANCE)  # what it checks is the whole store
    env = service_env(
        servers,
        DATABASE_URL=url,
        MNEMOFLOW_EMBEDDING_PROVIDER="openai",
        OPENAI_BASE_URL=f"http://127.0.0.1:{free_port()}",  # nobody listens there
        MNEMOFLOW_VECTOR_DIM="32",
        MNEMOFLOW_HTTP_EMBED_MAX_ATTEMPTS="2",
    )
    port = free_port()
    log_path = tmp_path / "gateway.log"
    with running(gateway_command(host="127.0.0.1", port=port), env, log_path) as proc:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base, proc, log_path=log_path)
        health = httpx.get(f"{base}/health").json()["embedding"]
        assert (health["provider"], health["remote"], health["dimensions"]) == ("openai", True, 32)
        for path, body in (("/memory/add", {"content": "a note"}), ("/memory/query", {"query": "a note"})):
            response = httpx.post(f"{base}{path}", json=body, timeout=30)
            assert response.status_code == 503, response.text
            error = response.json()["error"]
            assert error["code"] == "embedding_unavailable" and "ConnectError" in error["message"]
    with db.session() as s:
        assert s.execute(text("SELECT count(*) FROM memories")).scalar_one() == 0
        logged = s.execute(text("SELECT purpose, status, error FROM embed_logs ORDER BY id")).all()
    assert [(r.purpose, r.status) for r in logged] == [("add", "failed"), ("query", "failed")]
    assert all("ConnectError" in r.error for r in logged)
