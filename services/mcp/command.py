"""`mnemoflow mcp`: start the MCP server over stdio (a client spawns it) or streamable HTTP, and who may call it."""

from __future__ import annotations

import enum
import os
from pathlib import Path
from typing import Annotated

import typer

from services.cli.commands import gateway_url
from shared.config.server import is_loopback

# The SDK, uvicorn and the client are imported when the command runs: every other `mnemoflow` command starts without.


class Transport(enum.StrEnum):
    stdio = "stdio"
    http = "http"


class Refused(Exception):
    """The server would start open, or with options that contradict each other."""


def http_keys(*, environment: str, host: str, api_key: str | None) -> list[str]:
    """The keys HTTP callers must present as a bearer: the server's own key, whenever it has one (whoever reaches
    the port would act with it otherwise). Without a key, only on loopback in development; else `Refused`."""
    if api_key:
        return [api_key]
    if environment != "development":
        raise Refused(
            f"refusing to serve MCP over HTTP with MNEMOFLOW_ENVIRONMENT={environment} and no key: give --api-key "
            "(or $MNEMOFLOW_API_KEY), the tenant's gateway key; every HTTP caller must then send it as "
            "'Authorization: Bearer <key>'"
        )
    if not is_loopback(host):
        raise Refused(
            f"refusing to serve a keyless MCP server on {host}: anyone who reaches it would use the gateway. "
            "Give --api-key (callers send it as a bearer), or keep the default --host 127.0.0.1"
        )
    return []


def mcp(
    transport: Annotated[
        Transport,
        typer.Option(help="stdio: an MCP client starts this command; http: streamable HTTP at http://HOST:PORT/mcp"),
    ] = Transport.stdio,
    url: Annotated[
        str | None, typer.Option(help="The gateway [$MNEMOFLOW_URL, else http://127.0.0.1:8080]", show_default=False)
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(help="The gateway key every call sends; it decides the tenant [$MNEMOFLOW_API_KEY]"),
    ] = None,
    user_id: Annotated[
        str | None, typer.Option("--user-id", "--user", "-u", help="The tenant to act for [the key's, or anonymous]")
    ] = None,
    host: Annotated[str, typer.Option(help="HTTP: the address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP: the port to listen on")] = 8765,
    files_root: Annotated[
        Path | None,
        typer.Option(
            help="The folder `ingest` may read local files from [stdio: any file; HTTP: none]",
            exists=True,
            file_okay=False,
            resolve_path=True,
        ),
    ] = None,
) -> None:
    """Serve Mnemoflow's memory to AI agents over the Model Context Protocol (MCP).

    Tools: remember, recall, forget, list, get, reinforce, ingest, job_status; each is a call to the gateway with
    the key given here, so the key decides whose memories they are. An MCP client (Claude Desktop, an IDE, an
    agent framework) starts it over stdio:

        mnemoflow mcp --user-id alice

    or it listens on streamable HTTP (callers send the key as `Authorization: Bearer <key>` when it has one):

        mnemoflow mcp --transport http --port 8765 --api-key "$MNEMOFLOW_API_KEY"
    """
    import anyio
    from mnemoflow_client import AsyncMnemoflow

    from services.mcp.server import LocalFiles, build_server
    from services.mcp.transport import PATH, serve_http
    from shared.config import get_settings

    key = api_key if api_key is not None else (os.environ.get("MNEMOFLOW_API_KEY") or None)
    keys: list[str] = []
    if transport is Transport.http:
        try:
            keys = http_keys(environment=get_settings().environment, host=host, api_key=key)
        except Refused as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        files = LocalFiles(allowed=files_root is not None, root=files_root)
    else:
        files = LocalFiles(root=files_root)
    gateway = url or gateway_url()

    async def run() -> None:
        async with AsyncMnemoflow(gateway, api_key=key or "", user_id=user_id) as client:
            server = build_server(client, files=files)
            if transport is Transport.stdio:
                await server.run_stdio_async()
            else:
                typer.echo(f"MCP server on http://{host}:{port}{PATH} for the gateway at {gateway}", err=True)
                await serve_http(server, host=host, port=port, keys=keys)

    anyio.run(run)


def register(app: typer.Typer) -> None:
    """Add `mnemoflow mcp` to the `mnemoflow` app."""
    app.command()(mcp)
