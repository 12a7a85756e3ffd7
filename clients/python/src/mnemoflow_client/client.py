"""`Mnemoflow`: the synchronous client, one method per gateway route (the async twin is `aio.AsyncMnemoflow`).

The transport, the jobs' and the operator's routes are in `_sync.SyncBase`; the memories', queries', documents' and
ingestion's here."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

from . import _core as core
from ._core import Call, FileInput, Id, When, compact
from ._sync import SyncBase
from .schemas.ingest import IngestAccepted
from .schemas.memories import (
    BatchAccepted,
    MemoriesLinked,
    MemoryAddResult,
    MemoryCreate,
    MemoryDeleted,
    MemoryPage,
    MemoryPublic,
    MemoryReinforced,
)
from .schemas.query import QueryResponse, RetrievalOptions

BatchItem = MemoryCreate | Mapping[str, Any] | str
MemoryStatus = Literal["active", "superseded", "contradicted"]
LinkKind = Literal["association", "contradicts", "supersedes", "next"]


class Mnemoflow(SyncBase):
    """A client of a Mnemoflow gateway.

    >>> from mnemoflow_client import Mnemoflow
    >>> with Mnemoflow(user_id="alice") as memory:
    ...     memory.add("Alice prefers green tea in the morning", tags=["prefs"])
    ...     hits = memory.query("what does Alice drink?", k=3).matches

    Args:
        base_url: the gateway [$MNEMOFLOW_URL, else http://127.0.0.1:8080].
        api_key: sent as `Authorization: Bearer` [$MNEMOFLOW_API_KEY; "" sends none]. With keys configured on the
            gateway, the key decides the tenant; the operator key opens `/maintenance/*`.
        user_id: the tenant every call acts for unless it names another [none: the key's, or `anonymous`].
        timeout: seconds to wait for each connect, read and write.
        retries: how often to retry a 429, a 503 or a failed connection: a count, or a `RetryPolicy`.
        headers: more headers to send with every request.
        http_client: an `httpx.Client` of your own (its base URL and headers are left as they are).
    """

    # -- memories -------------------------------------------------------------------------------------------------

    def add(
        self,
        content: str,
        *,
        tags: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        user_id: str | None = None,
        salience: float | None = None,
        confidence: float | None = None,
        occurred_at: When | None = None,
        follows: Id | None = None,
    ) -> MemoryAddResult:
        """Store one memory; it is queryable when this returns. The same content twice is the same memory
        (`deduplicated: true`), so an add is safe to retry.

        `occurred_at`: when what it records happened (ISO 8601 or a datetime; UTC without a zone). `follows`: the
        memory it comes after (the previous turn), linked by a `next` waypoint."""
        body = compact(
            content=content,
            tags=tags,
            metadata=metadata,
            user_id=self._user(user_id),
            salience=salience,
            confidence=confidence,
            occurred_at=occurred_at,
            follows=follows,
        )
        return self._send(Call("POST", "/memory/add", json=body, result=MemoryAddResult))

    def batch(
        self,
        items: Iterable[BatchItem],
        *,
        user_id: str | None = None,
        sequence: bool = False,
        idempotency_key: str | None = None,
    ) -> BatchAccepted:
        """Store many memories through the workers: answers at once with a job (`wait(answer)` follows it).

        `items`: texts, dicts of `MemoryCreate`'s fields, or `MemoryCreate`s (at most the gateway's
        MNEMOFLOW_MAX_BATCH_ITEMS, 50,000 by default). `sequence`: the items are one conversation in order, each
        linked to the next. `idempotency_key`: the same key with the same batch answers the first job (`status:
        existing`) instead of storing again; one is made up for each call when not given, so retries are safe."""
        body = compact(
            items=[{"content": item} if isinstance(item, str) else item for item in items],
            user_id=self._user(user_id),
            sequence=sequence or None,
            idempotency_key=idempotency_key or f"mnemoflow-client-{uuid.uuid4()}",
        )
        return self._send(Call("POST", "/memory/batch", json=body, result=BatchAccepted))

    def get(self, memory_id: Id, *, user_id: str | None = None) -> MemoryPublic:
        """One memory by id (NotFound if it is not the tenant's)."""
        call = Call("GET", f"/memory/{memory_id}", params=compact(user_id=self._user(user_id)), result=MemoryPublic)
        return self._send(call)

    def update(
        self,
        memory_id: Id,
        *,
        content: str | None = None,
        tags: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        status: MemoryStatus | None = None,
        occurred_at: When | None = None,
        user_id: str | None = None,
    ) -> MemoryPublic:
        """Change a memory: new content is re-classified and re-embedded; tags and metadata are replaced; `status`
        superseded or contradicted ranks it lower. Returns the memory as changed."""
        body = compact(
            content=content,
            tags=tags,
            metadata=metadata,
            status=status,
            occurred_at=occurred_at,
            user_id=self._user(user_id),
        )
        return self._send(Call("PATCH", f"/memory/{memory_id}", json=body, result=MemoryPublic))

    def delete(self, memory_id: Id, *, user_id: str | None = None) -> MemoryDeleted:
        """Delete a memory, its vectors and its waypoints (NotFound if it is not the tenant's)."""
        params = compact(user_id=self._user(user_id))
        return self._send(Call("DELETE", f"/memory/{memory_id}", params=params, result=MemoryDeleted))

    def reinforce(self, memory_id: Id, *, boost: float | None = None, user_id: str | None = None) -> MemoryReinforced:
        """Tell the store a memory was used: its salience rises by `boost` (default: the server's). Not retried after
        a broken connection, since a second boost would count twice."""
        body = compact(id=memory_id, boost=boost, user_id=self._user(user_id))
        call = Call("POST", "/memory/reinforce", json=body, result=MemoryReinforced, idempotent=False)
        return self._send(call)

    def link(
        self,
        src_id: Id,
        dst_id: Id,
        *,
        kind: LinkKind = "association",
        weight: float | None = None,
        user_id: str | None = None,
    ) -> MemoriesLinked:
        """Link two memories by a waypoint: association, contradicts, supersedes (marks `dst_id` superseded) or
        next (reading order). Linking again updates the weight."""
        body = compact(src_id=src_id, dst_id=dst_id, kind=kind, weight=weight, user_id=self._user(user_id))
        return self._send(Call("POST", "/memory/link", json=body, result=MemoriesLinked))

    def list_memories(
        self,
        *,
        offset: int = 0,
        limit: int = 100,
        sector: str | None = None,
        tags: Sequence[str] | None = None,
        start_time: When | None = None,
        end_time: When | None = None,
        occurred_after: When | None = None,
        occurred_before: When | None = None,
        user_id: str | None = None,
    ) -> MemoryPage:
        """One page of the tenant's memories, newest first (`limit` up to 1,000): of one `sector`, carrying all of
        `tags`, stored between `start_time` and `end_time`, that happened between `occurred_after` and
        `occurred_before`. `iter_memories` pages through them all."""
        params = core.list_params(offset, limit, sector, tags, start_time, end_time, occurred_after, occurred_before)
        call = Call("GET", "/memory/all", params=params | compact(user_id=self._user(user_id)), result=MemoryPage)
        return self._send(call)

    def iter_memories(
        self,
        *,
        sector: str | None = None,
        tags: Sequence[str] | None = None,
        start_time: When | None = None,
        end_time: When | None = None,
        occurred_after: When | None = None,
        occurred_before: When | None = None,
        user_id: str | None = None,
        page_size: int = 200,
    ) -> Iterator[MemoryPublic]:
        """Every memory `list_memories` would list with these filters, a page at a time. A memory added while this
        runs does not make another come twice; one deleted meanwhile may make another be passed over."""
        page = core.Page()
        while True:
            answer = self.list_memories(
                offset=page.offset,
                limit=page_size,
                sector=sector,
                tags=tags,
                start_time=start_time,
                end_time=end_time,
                occurred_after=occurred_after,
                occurred_before=occurred_before,
                user_id=user_id,
            )
            fresh, more = page.take(answer.items, answer.total, page_size)
            yield from fresh
            if not more:
                return

    # -- query ----------------------------------------------------------------------------------------------------

    def query(
        self,
        query: str,
        *,
        k: int | None = None,
        user_id: str | None = None,
        sector: str | None = None,
        sectors: Sequence[str] | None = None,
        tags: Sequence[str] | None = None,
        min_score: float | None = None,
        min_evidence: float | None = None,
        start_time: When | None = None,
        end_time: When | None = None,
        occurred_after: When | None = None,
        occurred_before: When | None = None,
        explain: bool = False,
        token_budget: int | None = None,
        diversity: float | None = None,
        recency_weight: float | None = None,
        reinforce: bool | None = None,
        retrieval: RetrievalOptions | Mapping[str, Any] | None = None,
    ) -> QueryResponse:
        """The memories that matter for `query`, best first, at most `k` (default: the server's).

        Filters: `sector`/`sectors`, `tags` (all of them), `min_score` (least relevance), `min_evidence` (the
        least evidence the best candidate needs, else nothing is returned; 0: that gate off), stored between
        `start_time` and `end_time`, happened between `occurred_after` and `occurred_before`. `explain` adds each
        match's trace and the stages' timings; `token_budget` packs the best that fit in that many tokens;
        `diversity` (MMR's lambda) trades relevance for variety; `recency_weight` favours fresh memories;
        `reinforce=False` makes a read-only query; `retrieval` switches stages (`RetrievalOptions`)."""
        body = core.query_body(
            query,
            k=k,
            user_id=self._user(user_id),
            filters=compact(
                sector=sector,
                sectors=sectors,
                tags=tags,
                min_score=min_score,
                min_evidence=min_evidence,
                startTime=start_time,
                endTime=end_time,
                occurred_after=occurred_after,
                occurred_before=occurred_before,
            ),
            explain=explain,
            token_budget=token_budget,
            diversity=diversity,
            recency_weight=recency_weight,
            reinforce=reinforce,
            retrieval=retrieval,
        )
        return self._send(Call("POST", "/memory/query", json=body, result=QueryResponse))

    # -- ingestion -----------------------------------------------------------------------------------------------

    def ingest_file(
        self,
        file: FileInput,
        *,
        filename: str | None = None,
        content_type: str | None = None,
        tags: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        chunk_size: int | None = None,
        chunk_overlap: int | None = None,
        preserve_metadata: bool | None = None,
        occurred_at: When | None = None,
        user_id: str | None = None,
        wait: bool = False,
    ) -> IngestAccepted:
        """Upload a document, recording or page (a path, bytes or an open binary file; streamed, never read whole):
        the ingest worker extracts, chunks and stores it. Answers with the document and its job (`wait(answer)`
        follows it); the same bytes twice are one document (`status: existing`), so retrying is safe.

        `content_type` declares the format (read from the bytes when not given); tags must not contain commas
        (the form sends them comma-separated). `wait=True` lets the gateway hold the answer until the job ends
        (up to its MNEMOFLOW_INGEST_WAIT_MAX_SECONDS)."""
        fields = core.ingest_form(
            user_id=self._user(user_id),
            content_type=content_type,
            tags=tags,
            metadata=metadata,
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            preserve_metadata=preserve_metadata,
            occurred_at=occurred_at,
        )
        call = Call(
            "POST",
            "/memory/ingest/file",
            params=compact(wait=wait or None),
            upload=core.uploaded(file, filename, content_type, fields),
            result=IngestAccepted,
            timeout=max(self.settings.timeout, 300.0),
        )
        return self._send(call)

    def ingest_url(
        self,
        url: str,
        *,
        tags: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        chunk_size: int | None = None,
        chunk_overlap: int | None = None,
        preserve_metadata: bool | None = None,
        occurred_at: When | None = None,
        user_id: str | None = None,
        wait: bool = False,
    ) -> IngestAccepted:
        """Have the ingest worker fetch a web page or file (http/https, public addresses only) and store it. The same
        URL twice is one document. `wait=True`: as for `ingest_file`."""
        body = compact(
            url=url,
            tags=tags,
            metadata=metadata,
            config=core.chunking(chunk_size, chunk_overlap, preserve_metadata),
            occurred_at=occurred_at,
            user_id=self._user(user_id),
        )
        call = Call(
            "POST",
            "/memory/ingest/url",
            params=compact(wait=wait or None),
            json=body,
            result=IngestAccepted,
            timeout=max(self.settings.timeout, 120.0) if wait else None,
        )
        return self._send(call)

    def ingest(
        self,
        data: str | bytes,
        content_type: str,
        *,
        encoding: Literal["base64", "text"] | None = None,
        filename: str | None = None,
        tags: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        chunk_size: int | None = None,
        chunk_overlap: int | None = None,
        preserve_metadata: bool | None = None,
        occurred_at: When | None = None,
        user_id: str | None = None,
        wait: bool = False,
    ) -> IngestAccepted:
        """Ingest a document sent in the body (OpenMemory's shape): `content_type` a format name ("pdf", "md", "txt",
        "html", "mp3", …) or MIME type; bytes are sent base64-encoded, text as it is. Prefer `ingest_file` for large
        files (this one holds the document in memory, a third larger)."""
        encoded, how = core.ingest_body(data, encoding)
        body = compact(
            content_type=content_type,
            data=encoded,
            encoding=how,
            filename=filename,
            tags=tags,
            metadata=metadata,
            config=core.chunking(chunk_size, chunk_overlap, preserve_metadata),
            occurred_at=occurred_at,
            user_id=self._user(user_id),
        )
        call = Call(
            "POST",
            "/memory/ingest",
            params=compact(wait=wait or None),
            json=body,
            result=IngestAccepted,
            timeout=max(self.settings.timeout, 120.0) if wait else None,
        )
        return self._send(call)
