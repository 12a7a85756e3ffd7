"""ASGI middleware of the gateway: request ids, request metrics per route, and the request-body size limit (413)."""

from __future__ import annotations

import re
import time
import uuid

from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.gateway import metrics
from services.gateway.errors import error_body


class RequestMetrics:
    """Requests and latency per route template (pure ASGI: no per-request task and stream plumbing).

    Latency runs to the last byte of the response, before any background work of the request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = "500"  # unless the app sends another: an exception escaping it becomes a 500 outside
        done = False

        def record() -> None:
            path = getattr(scope.get("route"), "path", "unmatched")
            metrics.REQUESTS.labels(scope["method"], path, status).inc()
            metrics.LATENCY.labels(scope["method"], path).observe(time.perf_counter() - started)

        async def observed_send(message: Message) -> None:
            nonlocal status, done
            if message["type"] == "http.response.start":
                status = str(message["status"])
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False) and not done:
                done = True
                record()

        try:
            await self.app(scope, receive, observed_send)
        except _TooLarge:  # the body outgrew its limit while read: BodySizeLimit answers 413
            status = "413"
            raise
        finally:
            if not done:
                record()


class BodySizeLimit:
    """Refuse request bodies over the limit with 413, whether or not Content-Length is sent."""

    def __init__(self, app: ASGIApp, max_bytes: int, path_limits: dict[str, int] | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.path_limits = path_limits or {}  # routes with a limit of their own (uploads)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.path_limits.get(scope.get("path", ""), self.max_bytes)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._reject(scope, receive, send, limit)
            return
        seen = 0

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge(limit)
            return message

        try:
            await self.app(scope, limited_receive, send)
        except _TooLarge:
            await self._reject(scope, receive, send, limit)

    async def _reject(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        response = JSONResponse(error_body("payload_too_large", _too_large(limit)), status_code=413)
        await response(scope, receive, send)


def _too_large(limit: int) -> str:
    return f"request body exceeds {limit:,} bytes; split it into smaller requests"


class _TooLarge(HTTPException):
    """The body outgrew its limit while it was read (sent chunked, or longer than its Content-Length).

    An HTTPException because FastAPI turns any other error met while it reads a body into a 400 ("There was an
    error parsing the body"), but lets this one through to the error handler, which answers 413. Where it is met
    outside FastAPI's reading (a route reading the body itself), BodySizeLimit answers 413 itself."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, detail=_too_large(limit))


_CLIENT_ID = re.compile(r"[\w.:-]{1,128}")


class RequestId:
    """Give each request an id (the client's X-Request-ID when it sends a plain one), kept in the request's
    state for the logs and sent back in X-Request-ID."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")
        rid = given if _CLIENT_ID.fullmatch(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = rid

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                if not any(name.lower() == b"x-request-id" for name, _ in headers):
                    message = {**message, "headers": [*headers, (b"x-request-id", rid.encode())]}
            await send(message)

        await self.app(scope, receive, send_with_id)
