"""`AsyncMnemoflow`: the asynchronous client, `Mnemoflow`'s methods awaited (`async for` over the iterators).

Each method's docstring is its sync twin's, copied below; a test keeps the two classes' signatures the same."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, Literal

from . import _core as core
from ._async import AsyncBase
from ._core import Call, FileInput, Id, When, compact
from .client import BatchItem, LinkKind, MemoryStatus, Mnemoflow
from .schemas.ingest import IngestAccepted
from .schemas.memories import (
    BatchAccepted,
    MemoriesLinked,
    MemoryAddResult,
    MemoryDeleted,
    MemoryPage,
    MemoryPublic,
    MemoryReinforced,
)
from .schemas.query import QueryResponse, RetrievalOptions


class AsyncMnemoflow(AsyncBase):
    """An asynchronous client of a Mnemoflow gateway: `Mnemoflow`'s methods, awaited.

    >>> from mnemoflow_client import AsyncMnemoflow
    >>> async with AsyncMnemoflow(user_id="alice") as memory:
    ...     await memory.add("Alice prefers green tea in the morning", tags=["prefs"])
    ...     hits = (await memory.query("what does Alice drink?", k=3)).matches

    The arguments are `Mnemoflow`'s:

    Args:
        base_url: the gateway [$MNEMOFLOW_URL, else http://127.0.0.1:8080].
        api_key: sent as `Authorization: Bearer` [$MNEMOFLOW_API_KEY; "" sends none]. With keys configured on the
            gateway, the key decides the tenant; the operator key opens `/maintenance/*`.
        user_id: the tenant every call acts for unless it names another [none: the key's, or `anonymous`].
        timeout: seconds to wait for each connect, read and write.
        retries: how often to retry a 429, a 503 or a failed connection: a count, or a `RetryPolicy`.
        headers: more headers to send with every request.
        http_client: an `httpx.AsyncClient` of your own (its base URL and headers are left as they are).
    """

    # -- memories -------------------------------------------------------------------------------------------------

    async def add(
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
        return await self._send(Call("POST", "/memory/add", json=body, result=MemoryAddResult))

    async def batch(
        self,
        items: Iterable[BatchItem],
        *,
        user_id: str | None = None,
        sequence: bool = False,
        idempotency_key: str | None = None,
    ) -> BatchAccepted:
        body = compact(
            items=[{"content": item} if isinstance(item, str) else item for item in items],
            user_id=self._user(user_id),
            sequence=sequence or None,
            idempotency_key=idempotency_key or f"mnemoflow-client-{uuid.uuid4()}",
        )
        return await self._send(Call("POST", "/memory/batch", json=body, result=BatchAccepted))

    async def get(self, memory_id: Id, *, user_id: str | None = None) -> MemoryPublic:
        call = Call("GET", f"/memory/{memory_id}", params=compact(user_id=self._user(user_id)), result=MemoryPublic)
        return await self._send(call)

    async def update(
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
        body = compact(
            content=content,
            tags=tags,
            metadata=metadata,
            status=status,
            occurred_at=occurred_at,
            user_id=self._user(user_id),
        )
        return await self._send(Call("PATCH", f"/memory/{memory_id}", json=body, result=MemoryPublic))

    async def delete(self, memory_id: Id, *, user_id: str | None = None) -> MemoryDeleted:
        params = compact(user_id=self._user(user_id))
        return await self._send(Call("DELETE", f"/memory/{memory_id}", params=params, result=MemoryDeleted))

    async def reinforce(
        self, memory_id: Id, *, boost: float | None = None, user_id: str | None = None
    ) -> MemoryReinforced:
        body = compact(id=memory_id, boost=boost, user_id=self._user(user_id))
        call = Call("POST", "/memory/reinforce", json=body, result=MemoryReinforced, idempotent=False)
        return await self._send(call)

    async def link(
        self,
        src_id: Id,
        dst_id: Id,
        *,
        kind: LinkKind = "association",
        weight: float | None = None,
        user_id: str | None = None,
    ) -> MemoriesLinked:
        body = compact(src_id=src_id, dst_id=dst_id, kind=kind, weight=weight, user_id=self._user(user_id))
        return await self._send(Call("POST", "/memory/link", json=body, result=MemoriesLinked))

    async def list_memories(
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
        params = core.list_params(offset, limit, sector, tags, start_time, end_time, occurred_after, occurred_before)
        call = Call("GET", "/memory/all", params=params | compact(user_id=self._user(user_id)), result=MemoryPage)
        return await self._send(call)

    async def iter_memories(
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
    ) -> AsyncIterator[MemoryPublic]:
        page = core.Page()
        while True:
            answer = await self.list_memories(
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
            for item in fresh:
                yield item
            if not more:
                return

    # -- query ----------------------------------------------------------------------------------------------------

    async def query(
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
        return await self._send(Call("POST", "/memory/query", json=body, result=QueryResponse))

    # -- ingestion -----------------------------------------------------------------------------------------------

    async def ingest_file(
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
        return await self._send(call)

    async def ingest_url(
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
        return await self._send(call)

    async def ingest(
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
        return await self._send(call)


core.copy_docstrings(AsyncMnemoflow, Mnemoflow)
