"""SSRF through the URL ingest path: loopback in every spelling, redirects to it, and a name that rebinds.

A canary listens on every local address; whatever the spelling or the route (the gateway's check, the ingest
worker's fetch, a redirect, a second DNS answer), it must receive no connection. The test stack trusts
127.0.0.2 (MNEMOFLOW_INGEST_ALLOWED_NETWORKS, tests/conftest.py): the "allowed-looking" server lives there.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, unquote

import pytest

from shared.errors import InvalidInput
from shared.ingest import fetch_url
from tests.conftest import wait_for_job
from tests.security.canary import Canary
from tests.unit.ingest import samples

TRUSTED = "127.0.0.2"

# Each names this machine's loopback (or "this host"), none in the dotted form a naive check looks for.
SPELLINGS = [
    "http://2130706433:{port}/",  # decimal
    "http://017700000001:{port}/",  # octal, one number
    "http://0177.0.0.1:{port}/",  # octal, dotted
    "http://0x7f000001:{port}/",  # hexadecimal
    "http://0x7f.0.0.1:{port}/",  # hexadecimal, dotted
    "http://127.1:{port}/",  # short form
    "http://0:{port}/",  # 0.0.0.0, which reaches local listeners on Linux
    "http://[::ffff:127.0.0.1]:{port}/",  # IPv4-mapped IPv6
    "http://[::ffff:7f00:1]:{port}/",
    "http://[0:0:0:0:0:ffff:127.0.0.1]:{port}/",
    "http://[::127.0.0.1]:{port}/",  # IPv4-compatible IPv6
    "http://[::1]:{port}/",
    "http://localhost:{port}/",
]


class _Site(BaseHTTPRequestHandler):
    """/article, and /redirect?to=URL (percent-encoded) answering 302 to it."""

    def log_message(self, *_args: object) -> None:
        pass

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        if path == "/redirect":
            self.send_response(302)
            self.send_header("Location", unquote(query.removeprefix("to=")))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = samples.ARTICLE_HTML.encode()
        self.send_response(200 if path == "/article" else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _serve(host: str, port: int = 0) -> Iterator[str]:
    server = ThreadingHTTPServer((host, port), _Site)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    yield from _serve(TRUSTED)


@pytest.fixture
def canary() -> Iterator[Canary]:
    try:
        listener = Canary("::")  # every local address, IPv4 included
    except OSError:  # no IPv6 here
        listener = Canary("0.0.0.0")
    yield listener
    listener.close()


def spellings(port: int) -> list[str]:
    return [spelling.format(port=port) for spelling in SPELLINGS]


def redirect(site: str, target: str) -> str:
    return f"{site}/redirect?to={quote(target, safe='')}"


def test_the_fetcher_refuses_loopback_in_every_spelling(canary: Canary, site: str):
    for url in spellings(canary.port):
        with pytest.raises(InvalidInput, match=r"refused to fetch|not a valid URL"):
            fetch_url(url, allowed_networks=[f"{TRUSTED}/32"])
        with pytest.raises(InvalidInput, match=r"refused to fetch|not a valid URL"):
            fetch_url(redirect(site, url), allowed_networks=[f"{TRUSTED}/32"])
    assert canary.connections == 0


@pytest.mark.e2e
def test_the_gateway_refuses_loopback_in_every_spelling(http, tenant, canary: Canary):
    for url in spellings(canary.port):
        refused = http.post("/memory/ingest/url", json={"url": url, "user_id": tenant})
        assert refused.status_code == 422, (url, refused.text)
        assert any(word in refused.json()["error"]["message"] for word in ("refused", "not a valid URL")), url
    assert canary.connections == 0


@pytest.mark.e2e
def test_a_redirect_to_loopback_in_any_spelling_fails_its_document_at_once(http, worker, tenant, canary, site):
    accepted = {}
    for url in spellings(canary.port):
        response = http.post("/memory/ingest/url", json={"url": redirect(site, url), "user_id": tenant})
        assert response.status_code == 202, (url, response.text)  # the first hop is a trusted host
        accepted[url] = response.json()
    for url, body in accepted.items():
        job = wait_for_job(http, body["job_id"], tenant)
        assert job["status"] == "failed" and job["attempts"] == 1, (url, job)
        assert "refused to fetch" in job["error"] or "not a valid URL" in job["error"], (url, job["error"])
        document = http.get(f"/documents/{body['document_id']}", params={"user_id": tenant}).json()
        assert document["status"] == "failed" and document["memories_total"] == 0
    assert canary.connections == 0


def test_a_rebinding_name_is_fetched_from_the_address_that_was_checked():
    # The trusted site and the canary share a port, on 127.0.0.2 and 127.0.0.1: only the address differs.
    servers = _serve(TRUSTED)
    site = next(servers)
    port = int(site.rsplit(":", 1)[1])
    canary = Canary("127.0.0.1", port)
    answers: list[str] = []

    def rebinding(host: str, _port: int) -> list[str]:
        # First answer: the trusted address, which passes the check; every later one: loopback.
        answers.append(host)
        return [TRUSTED] if len(answers) == 1 else ["127.0.0.1"]

    article = f"http://rebind.example:{port}/article"
    try:
        fetched = fetch_url(article, allowed_networks=[f"{TRUSTED}/32"], resolver=rebinding)
        assert b"The Heron Migration" in fetched.content and answers == ["rebind.example"]
        with pytest.raises(InvalidInput, match=r"rebind\.example resolves to 127\.0\.0\.1, a loopback address"):
            fetch_url(article, allowed_networks=[f"{TRUSTED}/32"], resolver=rebinding)
        # A redirect back to the same name is resolved and checked again at that hop: refused there.
        answers.clear()
        hop = redirect(f"http://rebind.example:{port}", article)
        with pytest.raises(InvalidInput, match="loopback"):
            fetch_url(hop, allowed_networks=[f"{TRUSTED}/32"], resolver=rebinding)
        assert answers == ["rebind.example", "rebind.example"]
        assert canary.connections == 0
    finally:
        canary.close()
        servers.close()
