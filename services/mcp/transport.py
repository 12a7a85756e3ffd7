"""The MCP server over streamable HTTP: the SDK's Starlette app behind a bearer check, under uvicorn."""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

PATH = "/mcp"


class BearerGuard:
    """ASGI middleware: an HTTP request without `Authorization: Bearer <one of keys>` is answered 401."""

    def __init__(self, app: ASGIApp, keys: Sequence[str]) -> None:
        if not keys:
            raise ValueError("a bearer guard needs at least one key")
        self.app = app
        self._keys = [key.encode() for key in keys]

    def _presented(self, scope: Scope) -> bytes | None:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, token = value.partition(b" ")
                return token.strip() if scheme.lower() == b"bearer" else None
        return None

    def allows(self, scope: Scope) -> bool:
        token = self._presented(scope)
        # every key compared, in constant time each, so the answer's timing says nothing about which one nearly matched
        return token is not None and any([hmac.compare_digest(token, key) for key in self._keys])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.allows(scope):
            await self.app(scope, receive, send)
            return
        refused = JSONResponse(
            {
                "error": {
                    "code": "unauthorized",
                    "message": "this MCP server requires its key: send 'Authorization: Bearer <key>' with the key "
                    "it was started with (--api-key or $MNEMOFLOW_API_KEY)",
                }
            },
            status_code=401,
            headers={"WWW-Authenticate": 'Bearer realm="mnemoflow-mcp"'},
        )
        await refused(scope, receive, send)


def http_app(server: MCPServer[Any], *, host: str, keys: Sequence[str]) -> ASGIApp:
    """The server's streamable HTTP app at /mcp, behind a `BearerGuard` when there are keys."""
    # On a loopback host the SDK also checks the Host and Origin headers (DNS rebinding).
    app: ASGIApp = server.streamable_http_app(streamable_http_path=PATH, host=host)
    return BearerGuard(app, keys) if keys else app


async def serve_http(server: MCPServer[Any], *, host: str, port: int, keys: Sequence[str]) -> None:
    """Serve until stopped (SIGINT or SIGTERM)."""
    config = uvicorn.Config(http_app(server, host=host, keys=keys), host=host, port=port, log_level="info")
    await uvicorn.Server(config).serve()
