"""A stand-in gateway on loopback (a real HTTP server in a thread) that answers what a test scripts: statuses,
headers and bodies, or a dropped connection; it records every request it got."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

DROP = "drop"  # close the connection without answering, as a gateway killed mid-request does


@dataclass
class Seen:
    """A request as the server got it."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Answer:
    status: int = 200
    body: Any = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


class FakeGateway:
    """Answers each request with the next scripted answer (200 `{}` once they run out), or with `handler(seen)`."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.script: list[Answer | str] = []
        self.handler: Callable[[Seen], Answer | str] | None = None
        self.seen: list[Seen] = []
        self.lock = threading.Lock()

    def answer(self, seen: Seen) -> Answer | str:
        with self.lock:
            self.seen.append(seen)
            if self.script:
                return self.script.pop(0)
        return self.handler(seen) if self.handler else Answer()


def _handler_for(gateway: FakeGateway) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_args: object) -> None:
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            parts = urlsplit(self.path)
            seen = Seen(
                self.command,
                parts.path,
                parse_qs(parts.query),
                {k.lower(): v for k, v in self.headers.items()},
                self.rfile.read(length),
            )
            answer = gateway.answer(seen)
            if answer == DROP:
                self.close_connection = True
                self.connection.close()
                return
            assert isinstance(answer, Answer)
            body = answer.body if isinstance(answer.body, bytes) else json.dumps(answer.body).encode()
            self.send_response(answer.status)
            headers = {"Content-Type": "application/json", "X-Request-ID": "req-test-1", **answer.headers}
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PATCH = do_DELETE = _serve

    return Handler


@pytest.fixture
def fake_gateway() -> Iterator[FakeGateway]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(gateway := FakeGateway("")))
    server.daemon_threads = True
    gateway.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield gateway
    finally:
        server.shutdown()
        server.server_close()
