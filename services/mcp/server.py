"""The MCP server's tools: remember, recall, forget, list, get, reinforce, ingest and job_status, each one call of
the Python client (`AsyncMnemoflow`), whose key decides the tenant.

Each tool answers a short text for the model to read and, as structured content, the gateway's own answer (the
client's pydantic schema, declared as the tool's output schema). An error the gateway answers is the tool's error,
with the gateway's message and status.
"""

# No `from __future__ import annotations`: the SDK reads the tools' annotations to build their schemas.

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from mnemoflow_client import (
    AsyncMnemoflow,
    IngestAccepted,
    JobPublic,
    MemoryAddResult,
    MemoryDeleted,
    MemoryPage,
    MemoryPublic,
    MemoryReinforced,
    MnemoflowError,
    QueryResponse,
)
from pydantic import BaseModel, Field

from services.mcp.render import (
    accepted_text,
    added_text,
    job_text,
    memory_text,
    page_text,
    recalled_text,
)

INSTRUCTIONS = (
    "Long-term memory. `remember` stores a fact, preference or event as one memory; `recall` finds the memories "
    "that matter for a question (explain=true says why each came back); `get`, `list`, `reinforce` and `forget` "
    "work on memories by id; `ingest` reads a document (a URL or a local file) into memories in the background, "
    "and `job_status` follows it."
)
MemoryId = Annotated[str, Field(description="The memory's id (a UUID, as `remember`, `recall` or `list` gave it)")]
Tags = Annotated[list[str] | None, Field(description="Short labels, e.g. ['prefs', 'project-x']")]
Sector = Annotated[
    str | None,
    Field(description="Only memories of this sector: episodic, semantic, procedural, emotional or reflective"),
]


@dataclass(frozen=True)
class LocalFiles:
    """Which local files `ingest` may read: any (`root` None), those under `root`, or none (`allowed` False)."""

    allowed: bool = True
    root: Path | None = None

    def check(self, source: str) -> Path:
        """The file `source` names, resolved, if this server may read it; a ToolError saying why not otherwise."""
        if not self.allowed:
            raise ToolError(
                "this server reads no local files (over HTTP it is started with --files-root DIR to read those "
                "under DIR): send an http(s) URL instead"
            )
        path = Path(source).expanduser().resolve()
        if self.root is not None and not path.is_relative_to(self.root.resolve()):
            raise ToolError(f"{source} is outside {self.root}, the only folder this server reads files from")
        if not path.is_file():
            raise ToolError(f"no such file: {path}")
        return path


def _answer(text: str, model: BaseModel) -> CallToolResult:
    return CallToolResult(content=[TextContent(text=text)], structured_content=model.model_dump(mode="json"))


@contextlib.contextmanager
def _gateway_errors() -> Iterator[None]:
    """The gateway's errors as the tool's: its message and status, for the model to act on."""
    try:
        yield
    except MnemoflowError as exc:
        status = f" ({exc.status} {exc.code})" if exc.status else ""
        raise ToolError(f"{exc.message}{status}") from exc


def build_server(client: AsyncMnemoflow, *, files: LocalFiles | None = None) -> MCPServer[Any]:
    """An MCP server whose tools act through `client` (its key and user_id decide the tenant)."""
    local_files = files or LocalFiles()
    server: MCPServer[Any] = MCPServer("mnemoflow", instructions=INSTRUCTIONS)
    writes = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True)
    reads = ToolAnnotations(read_only_hint=True)

    @server.tool(annotations=writes)
    async def remember(
        content: Annotated[str, Field(description="The text to remember, kept verbatim")],
        tags: Tags = None,
        metadata: Annotated[dict[str, Any] | None, Field(description="Any JSON object kept with it")] = None,
        occurred_at: Annotated[
            str | None, Field(description="When it happened, ISO 8601 (default: now, or a date in metadata)")
        ] = None,
    ) -> Annotated[CallToolResult, MemoryAddResult]:
        """Store one memory; it can be recalled as soon as this returns. Mnemoflow sorts it into its sectors
        (episodic, semantic, procedural, emotional, reflective) itself. The same content again is the same memory."""
        with _gateway_errors():
            added = await client.add(content, tags=tags, metadata=metadata, occurred_at=occurred_at)
        return _answer(added_text(added), added)

    # a query reinforces what it returns (the gateway's default): recalling is not read-only
    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
    async def recall(
        query: Annotated[str, Field(description="A question or a few words about what to recall")],
        k: Annotated[int, Field(ge=1, le=100, description="How many memories at most")] = 8,
        tags: Annotated[list[str] | None, Field(description="Only memories with all of these tags")] = None,
        sector: Sector = None,
        explain: Annotated[bool, Field(description="Say why each memory came back (its score's parts)")] = False,
    ) -> Annotated[CallToolResult, QueryResponse]:
        """Find the memories that matter for a query, best first, by meaning, words, links and recency. Recalling
        a memory strengthens it a little."""
        with _gateway_errors():
            answer = await client.query(query, k=k, tags=tags, sector=sector, explain=explain)
        return _answer(recalled_text(answer), answer)

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True))
    async def forget(memory_id: MemoryId) -> Annotated[CallToolResult, MemoryDeleted]:
        """Delete one memory for good."""
        with _gateway_errors():
            deleted = await client.delete(memory_id)
        return _answer(f"forgot memory {deleted.id}", deleted)

    @server.tool(name="list", annotations=reads)
    async def list_memories(
        offset: Annotated[int, Field(ge=0, description="How many to skip (the next page: offset + limit)")] = 0,
        limit: Annotated[int, Field(ge=1, le=200, description="How many on this page")] = 20,
        tags: Annotated[list[str] | None, Field(description="Only memories with all of these tags")] = None,
        sector: Sector = None,
    ) -> Annotated[CallToolResult, MemoryPage]:
        """List stored memories, newest first, a page at a time."""
        with _gateway_errors():
            page = await client.list_memories(offset=offset, limit=limit, tags=tags, sector=sector)
        return _answer(page_text(page), page)

    @server.tool(annotations=reads)
    async def get(memory_id: MemoryId) -> Annotated[CallToolResult, MemoryPublic]:
        """One memory by id: its content, tags, metadata, sectors and salience."""
        with _gateway_errors():
            memory = await client.get(memory_id)
        return _answer(memory_text(memory), memory)

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False))
    async def reinforce(
        memory_id: MemoryId,
        boost: Annotated[
            float | None, Field(gt=0.0, le=1.0, description="How much to raise its salience (default: the server's)")
        ] = None,
    ) -> Annotated[CallToolResult, MemoryReinforced]:
        """Mark a memory as important: its salience grows, so it ranks higher and fades more slowly."""
        with _gateway_errors():
            reinforced = await client.reinforce(memory_id, boost=boost)
        return _answer(f"memory {reinforced.id}: salience now {reinforced.salience:.3f}", reinforced)

    @server.tool(annotations=writes)
    async def ingest(
        source: Annotated[str, Field(description="An http(s) URL, or the path of a local file (PDF, text, …)")],
        tags: Annotated[list[str] | None, Field(description="Tags for every memory made from it")] = None,
        metadata: Annotated[dict[str, Any] | None, Field(description="Kept on the document and its memories")] = None,
    ) -> Annotated[CallToolResult, IngestAccepted]:
        """Read a document into memories, chunk by chunk, in the background: answers at once with a job to follow
        with `job_status`. The same document again is not stored twice."""
        is_url = source.startswith(("http://", "https://"))
        path = None if is_url else local_files.check(source)
        with _gateway_errors():
            if path is None:
                accepted = await client.ingest_url(source, tags=tags, metadata=metadata)
            else:
                accepted = await client.ingest_file(path, tags=tags, metadata=metadata)
        return _answer(accepted_text(source, accepted), accepted)

    @server.tool(annotations=reads)
    async def job_status(
        job_id: Annotated[str, Field(description="The job's id, as `ingest` gave it")],
    ) -> Annotated[CallToolResult, JobPublic]:
        """Where a background job stands: queued, running (with its progress), succeeded, failed or cancelled."""
        try:
            uuid.UUID(job_id)
        except ValueError:
            raise ToolError(f"{job_id!r} is not a job id (a UUID, as `ingest` gave it)") from None
        with _gateway_errors():
            job = await client.job(job_id)
        return _answer(job_text(job), job)

    return server
