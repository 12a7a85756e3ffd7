"""`mnemoflow mcp` against the whole stack, driven by the MCP SDK's own client: over stdio (the client spawns the
command) and over streamable HTTP (a server process, with and without its key), every tool, and ingestion followed
to its end with job_status."""

from __future__ import annotations

import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp.client import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from infra.embedded import free_port
from tests.conftest import ROOT, running, service_env
from tests.e2e.test_ingest import TRUSTED_HOST, _serve

pytestmark = pytest.mark.e2e

MNEMOFLOW = Path(sys.executable).parent / "mnemoflow"
TOOLS = {"remember", "recall", "forget", "list", "get", "reinforce", "ingest", "job_status"}
NOTES = """# Ferry notes

The morning ferry to the island leaves pier four at 07:40 and takes fifty minutes.

Bicycles travel free on the ferry; the café on board sells cardamom buns until ten.
"""


@pytest.fixture(scope="module")
def trusted_site() -> Iterator[str]:
    yield from _serve(TRUSTED_HOST)


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool's structured result, after checking that it did not fail and said something."""
    result = await session.call_tool(tool, arguments)
    text = " ".join(getattr(block, "text", "") for block in result.content)
    assert not result.is_error, f"{tool} failed: {text}"
    assert text.strip()
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def refused(session: ClientSession, tool: str, **arguments: Any) -> str:
    """The error text of a tool call that failed."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    return " ".join(getattr(block, "text", "") for block in result.content)


async def memories_round_trip(session: ClientSession, tenant: str) -> None:
    """Every memory tool, as an agent would chain them."""
    listed_tools = (await session.list_tools()).tools
    assert {tool.name for tool in listed_tools} == TOOLS
    schemas = {tool.name: tool for tool in listed_tools}
    assert "query" in schemas["recall"].input_schema["properties"]
    assert schemas["recall"].output_schema and "matches" in schemas["recall"].output_schema["properties"]

    added = await call(
        session, "remember", content="Alice prefers green tea in the morning", tags=["prefs"], metadata={"via": "mcp"}
    )
    assert added["user_id"] == tenant and not added["deduplicated"]
    other = await call(session, "remember", content="Kai repairs bicycles on Saturdays", tags=["routine"])
    again = await call(session, "remember", content="Alice prefers green tea in the morning")
    assert again["deduplicated"] and again["id"] == added["id"]

    result = await session.call_tool("recall", {"query": "green tea in the morning", "k": 3, "explain": True})
    recalled = result.structured_content
    assert not result.is_error and recalled["matches"][0]["id"] == added["id"]
    trace = recalled["matches"][0]["trace"]
    assert trace and trace["components"]
    assert "why:" in result.content[0].text and "green tea" in result.content[0].text
    plain = await call(session, "recall", query="who repairs bicycles?", tags=["routine"])
    assert [m["id"] for m in plain["matches"]] == [other["id"]] and plain["matches"][0]["trace"] is None
    only_prefs = await call(session, "recall", query="who repairs bicycles?", tags=["prefs"])
    assert other["id"] not in {m["id"] for m in only_prefs["matches"]}

    got = await call(session, "get", memory_id=added["id"])
    assert got["content"] == "Alice prefers green tea in the morning" and got["metadata"] == {"via": "mcp"}
    boosted = await call(session, "reinforce", memory_id=added["id"], boost=0.2)
    assert boosted["salience"] > got["salience"]
    # kept (at least: a recall's own reinforcement may land after it, and salience only grows here)
    assert (await call(session, "get", memory_id=added["id"]))["salience"] >= boosted["salience"]

    page = await call(session, "list", limit=1)
    assert page["total"] == 2 and len(page["items"]) == 1
    assert [m["id"] for m in (await call(session, "list", tags=["prefs"]))["items"]] == [added["id"]]

    assert (await call(session, "forget", memory_id=other["id"]))["id"] == other["id"]
    missing = await refused(session, "get", memory_id=other["id"])
    assert f"memory {other['id']} not found" in missing and "404" in missing
    assert "not a job id" in await refused(session, "job_status", job_id="nope")


async def followed(session: ClientSession, job_id: str, timeout: float = 120) -> dict[str, Any]:
    """The job, polled with job_status until it has ended."""
    deadline = time.monotonic() + timeout
    while True:
        job = await call(session, "job_status", job_id=job_id)
        if job["status"] in ("succeeded", "failed", "cancelled") or time.monotonic() > deadline:
            return job
        await anyio.sleep(0.2)


async def ingested(session: ClientSession, source: str) -> dict[str, Any]:
    """The finished job of a document ingested through the ingest tool."""
    accepted = await call(session, "ingest", source=source, tags=["docs"])
    assert accepted["job_id"] and accepted["status"] == "queued"
    job = await followed(session, accepted["job_id"])
    assert job["status"] == "succeeded", job
    assert job["progress"]["total"] >= 1 and job["progress"]["done"] == job["progress"]["total"]
    return accepted


def test_over_stdio_every_tool_works_and_a_local_file_is_ingested(gateway: str, worker, servers, tenant, tmp_path):
    notes = tmp_path / "ferry.md"
    notes.write_text(NOTES)
    params = StdioServerParameters(
        command=str(MNEMOFLOW),
        args=["mcp", "--url", gateway, "--user-id", tenant],
        env=service_env(servers),
        cwd=ROOT,
    )

    async def scenario() -> None:
        with open(tmp_path / "mcp-stdio.log", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                await memories_round_trip(session, tenant)
                accepted = await ingested(session, str(notes))
                found = await call(session, "recall", query="when does the morning ferry leave?", tags=["docs"])
                assert found["matches"] and found["matches"][0]["document_id"] == accepted["document_id"]
                assert "no such file" in await refused(session, "ingest", source=str(tmp_path / "absent.md"))

    anyio.run(scenario)


def start_http(servers: dict[str, str], log: Path, args: list[str], **env: str):
    """`mnemoflow mcp --transport http` as a process on a free port: (the context of the running process, its URL)."""
    port = free_port()
    command = ["services.cli.main", "mcp", "--transport", "http", "--port", str(port), *args]
    return running(command, service_env(servers, **env), log), f"http://127.0.0.1:{port}/mcp"


def wait_listening(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"mnemoflow mcp exited {proc.returncode}:\n{log.read_text()}")
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.TransportError:
            time.sleep(0.2)
    raise AssertionError(f"mnemoflow mcp did not listen in {timeout}s:\n{log.read_text()}")


def test_over_http_every_tool_works_and_files_stay_inside_the_root(
    gateway: str, worker, servers, tenant, tmp_path, trusted_site: str
):
    inside, outside = tmp_path / "shared", tmp_path / "private"
    inside.mkdir()
    outside.mkdir()
    (inside / "ferry.md").write_text(NOTES)
    (outside / "secret.md").write_text("the safe's code is 4711")
    log = tmp_path / "mcp-http.log"
    process, url = start_http(
        servers, log, ["--url", gateway, "--user-id", tenant, "--files-root", str(inside)], MNEMOFLOW_API_KEY=""
    )
    with process as proc:
        wait_listening(url, proc, log)

        async def scenario() -> None:
            async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                await memories_round_trip(session, tenant)
                await ingested(session, str(inside / "ferry.md"))
                page = await ingested(session, f"{trusted_site}/article")
                herons = await call(session, "recall", query="where do the grey herons nest?", tags=["docs"])
                assert herons["matches"][0]["document_id"] == page["document_id"]
                escaped = await refused(session, "ingest", source=str(inside / ".." / "private" / "secret.md"))
                assert "outside" in escaped and str(inside) in escaped

        anyio.run(scenario)


def test_over_http_with_a_key_every_caller_must_send_it(gateway: str, servers, tenant, tmp_path):
    key = secrets.token_urlsafe(24)
    log = tmp_path / "mcp-keyed.log"
    process, url = start_http(
        servers, log, ["--url", gateway, "--user-id", tenant, "--api-key", key], MNEMOFLOW_ENVIRONMENT="production"
    )
    with process as proc:
        wait_listening(url, proc, log)
        hello = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        for headers in ({}, {"Authorization": "Bearer wrong-key-of-some-length"}, {"Authorization": key}):
            answer = httpx.post(url, json=hello, headers={"Accept": "application/json, text/event-stream", **headers})
            assert answer.status_code == 401, answer.text
            assert answer.headers["www-authenticate"].startswith("Bearer")
            assert "Authorization: Bearer" in answer.json()["error"]["message"]

        async def scenario() -> None:
            with_key = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
            async with (
                with_key,
                streamable_http_client(url, http_client=with_key) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                assert {tool.name for tool in (await session.list_tools()).tools} == TOOLS
                added = await call(session, "remember", content="Only key holders reach this memory")
                assert added["user_id"] == tenant

        anyio.run(scenario)


def test_outside_development_http_without_a_key_does_not_start(servers):
    env = service_env(servers, MNEMOFLOW_ENVIRONMENT="production", MNEMOFLOW_API_KEY="")
    args = [str(MNEMOFLOW), "mcp", "--transport", "http", "--port", str(free_port())]
    done = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "refusing to serve MCP over HTTP" in done.stderr
    open_host = [*args[:-2], "--host", "0.0.0.0", "--port", str(free_port())]
    done = subprocess.run(
        open_host, env=service_env(servers, MNEMOFLOW_API_KEY=""), cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "keyless MCP server on 0.0.0.0" in done.stderr
