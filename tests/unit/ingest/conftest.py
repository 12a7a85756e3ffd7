"""Files made once per session, and a local HTTP server (loopback only) for the fetch tests."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.unit.ingest import samples


@pytest.fixture(scope="session")
def sample_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ingest-samples")


@pytest.fixture(scope="session")
def speech_wav(sample_dir: Path) -> Path:
    return samples.speech_wav(sample_dir / "speech.wav")


class _Handler(BaseHTTPRequestHandler):
    """Routes: /article, /redirect?to=URL, /loop/N, /big, /stream-big, /gzip-bomb, /status/N, /slow, /echo-host."""

    def log_message(self, *_args: object) -> None:
        pass

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        if path == "/article":
            self._send(200, samples.ARTICLE_HTML.encode(), "text/html; charset=utf-8")
        elif path == "/redirect":
            self._redirect(query.removeprefix("to="))
        elif path.startswith("/loop/"):
            self._redirect(f"/loop/{int(path.rsplit('/', 1)[1]) + 1}")
        elif path == "/big":
            self._send(200, b"x" * 2_000_000, "text/plain")
        elif path == "/stream-big":
            self._stream_without_length(2_000_000)
        elif path == "/gzip-bomb":
            body = gzip.compress(b"\0" * 50_000_000, compresslevel=9)
            self._send(200, body, "text/plain", extra={"Content-Encoding": "gzip"})
        elif path.startswith("/status/"):
            self._send(int(path.rsplit("/", 1)[1]), b"nope", "text/plain")
        elif path == "/slow":
            time.sleep(2)
            self._send(200, b"late", "text/plain")
        elif path == "/echo-host":
            self._send(200, (self.headers.get("Host") or "").encode(), "text/plain")
        else:
            self._send(404, b"unknown", "text/plain")

    def _send(self, status: int, body: bytes, content_type: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _stream_without_length(self, size: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Connection", "close")
        self.end_headers()
        for _ in range(size // 65536 + 1):
            try:
                self.wfile.write(b"y" * 65536)
            except (BrokenPipeError, ConnectionResetError):
                return


def _serve(host: str) -> Iterator[str]:
    server = ThreadingHTTPServer((host, 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def http_server() -> Iterator[str]:
    """Base URL of a server on 127.0.0.1."""
    yield from _serve("127.0.0.1")


@pytest.fixture(scope="session")
def second_loopback_server() -> Iterator[str]:
    """Base URL of a server on 127.0.0.2 (Linux routes all of 127/8 to loopback): a stand-in "trusted host"."""
    yield from _serve("127.0.0.2")
