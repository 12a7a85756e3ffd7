"""An embedding provider's failure, as a tenant sees it (a 503, a job's error), names the provider and what went
wrong, never where the provider lives; the gateway's log keeps the address."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from infra.embedded import free_port
from infra.processes import gateway_command, wait_healthy
from tests.conftest import running, service_env, wait_for_job, wait_for_worker, worker_args

pytestmark = pytest.mark.e2e

INTERNAL = "http://10.7.7.7:8000/v1"  # an address the provider's own message gives away


class RefusingProvider(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that refuses every request (400: not retried)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        raw = json.dumps({"error": {"message": f"model 'm' is not served by {INTERNAL}"}}).encode()
        self.send_response(400)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def provider() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), RefusingProvider)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def _hides(message: str, provider: str) -> None:
    assert "openai" in message and "400" in message, message  # the provider and the failure
    for address in (provider, provider.removeprefix("http://"), INTERNAL, "10.7.7.7", "http://", "https://"):
        assert address not in message, message


def test_a_tenant_sees_which_provider_failed_and_how_but_not_its_address(
    make_store, servers, settings, keys, provider, tmp_path
):
    url, _ = make_store("provider_errors")
    broker = servers["redis_url"].rsplit("/", 1)[0] + "/9"  # queues of its own: no other worker takes its tasks
    env = service_env(
        servers,
        DATABASE_URL=url,
        REDIS_URL=broker,
        MNEMOFLOW_EMBEDDING_PROVIDER="openai",
        OPENAI_BASE_URL=provider,
        MNEMOFLOW_VECTOR_DIM="32",
        MNEMOFLOW_HTTP_EMBED_MAX_ATTEMPTS="1",
        MNEMOFLOW_JOB_MAX_ATTEMPTS="1",
        **keys.env(),
    )
    port = free_port()
    name = f"provider-errors-{uuid.uuid4().hex[:6]}"
    gateway_log, worker_log = tmp_path / "gateway.log", tmp_path / "worker.log"
    # one after the other: both record the new store's model on first start
    with running(worker_args(name, concurrency=1), env, worker_log) as worker:
        wait_for_worker(settings.model_copy(update={"redis_url": broker}), name, worker, log_path=worker_log)
        with running(gateway_command(host="127.0.0.1", port=port), env, gateway_log) as gateway:
            base = f"http://127.0.0.1:{port}"
            wait_healthy(base, gateway, log_path=gateway_log)
            _ask_as_a_tenant(base, keys, provider)
    assert f"{provider}/v1/embeddings answered 400" in gateway_log.read_text()  # the operator's detail


def _ask_as_a_tenant(base: str, keys, provider: str) -> None:
    with httpx.Client(base_url=base, headers={"x-api-key": keys.key_a}, timeout=30) as alice:
        for path, body in (("/memory/add", {"content": "a note"}), ("/memory/query", {"query": "a note"})):
            refused = alice.post(path, json=body)
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["code"] == "embedding_unavailable"
            _hides(refused.text, provider)
        batch = alice.post("/memory/batch", json={"items": [{"content": "a batched note"}]})
        assert batch.status_code == 202, batch.text
        job = wait_for_job(alice, batch.json()["job_id"], keys.tenant_a)
        assert job["status"] == "failed" and job["error"], job
        _hides(job["error"], provider)
