"""The asynchronous client's transport, system, job and operator routes: `_sync.SyncBase` on `httpx.AsyncClient`,
the same methods awaited (their docstrings are the sync ones, copied by `aio`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, Self, TypeVar, overload

import httpx
from pydantic import BaseModel

from . import _core as core
from ._core import Call, Id, compact
from .errors import JobFailed, WaitTimeout
from .jobs import DECAY_ENDED, JOB_ENDED, JobGroup, JobRef, decay_moved, job_id_of, moved
from .retry import RetryPolicy, as_policy
from .schemas.data import EraseAccepted, ImportAccepted
from .schemas.ingest import DocumentDetail, DocumentPage, DocumentPublic
from .schemas.jobs import DecayRun, JobPublic, ReembedAccepted

Model = TypeVar("Model", bound=BaseModel)


class AsyncBase:
    """The transport and the routes of jobs and operators, for `AsyncMnemoflow` (read its docstring)."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        user_id: str | None = None,
        timeout: float = 30.0,
        retries: int | RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self.settings = core.Settings.resolve(base_url, api_key, user_id, timeout, as_policy(retries), headers)
        self._http = http_client or httpx.AsyncClient(
            base_url=self.settings.base_url, headers=self.settings.headers, timeout=timeout
        )
        self._own_http = http_client is None

    async def aclose(self) -> None:
        """Close the connections (a client made with `http_client` leaves that one open)."""
        if self._own_http:
            await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.settings.base_url!r}, user_id={self.settings.user_id!r})"

    # -- sending -------------------------------------------------------------------------------------------------

    def _user(self, user_id: str | None) -> str | None:
        return user_id if user_id is not None else self.settings.user_id

    async def _send(self, call: Call) -> Any:
        policy, retry = self.settings.retry, 0
        while True:
            outcome: httpx.Response | Exception
            with contextlib.ExitStack() as stack:
                try:
                    outcome = await self._http.request(**call.request_args(stack))
                except httpx.TransportError as exc:
                    outcome = exc
            retry += 1
            delay = core.retry_delay(policy, call, retry, outcome)
            if delay is None:
                if isinstance(outcome, Exception):
                    raise core.transport_error(call, self.settings.base_url, outcome) from outcome
                return core.answer(call, outcome)
            if policy.on_retry is not None:
                policy.on_retry(retry, delay, core.retry_reason(outcome))
            await asyncio.sleep(delay)

    @overload
    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = ...,
        json: Any = ...,
        result: type[Model],
        idempotent: bool | None = ...,
    ) -> Model: ...

    @overload
    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = ...,
        json: Any = ...,
        result: None = ...,
        idempotent: bool | None = ...,
    ) -> Any: ...

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        result: type[BaseModel] | None = None,
        idempotent: bool | None = None,
    ) -> Any:
        safe = method.upper() != "POST" if idempotent is None else idempotent
        body = core.jsonable(json) if json is not None else None
        return await self._send(Call(method.upper(), path, params=params, json=body, result=result, idempotent=safe))

    # -- system ---------------------------------------------------------------------------------------------------

    async def health(self) -> dict[str, Any]:
        return dict(await self._send(Call("GET", "/health", answers=(503,))))

    async def sectors(self, *, user_id: str | None = None) -> dict[str, Any]:
        return dict(await self._send(Call("GET", "/sectors", params=compact(user_id=self._user(user_id)))))

    # -- documents -------------------------------------------------------------------------------------------------

    async def documents(
        self,
        *,
        status: str | None = None,
        offset: int = 0,
        limit: int = 50,
        user_id: str | None = None,
    ) -> DocumentPage:
        params = compact(status=status, offset=offset, limit=limit, user_id=self._user(user_id))
        return await self._send(Call("GET", "/documents", params=params, result=DocumentPage))

    async def iter_documents(
        self, *, status: str | None = None, user_id: str | None = None, page_size: int = 200
    ) -> AsyncIterator[DocumentPublic]:
        page = core.Page()
        while True:
            answer = await self.documents(status=status, offset=page.offset, limit=page_size, user_id=user_id)
            fresh, more = page.take(answer.items, answer.total, page_size)
            for item in fresh:
                yield item
            if not more:
                return

    async def document(
        self, document_id: Id, *, offset: int = 0, limit: int = 100, user_id: str | None = None
    ) -> DocumentDetail:
        params = compact(offset=offset, limit=limit, user_id=self._user(user_id))
        return await self._send(Call("GET", f"/documents/{document_id}", params=params, result=DocumentDetail))

    # -- jobs -----------------------------------------------------------------------------------------------------

    async def job(self, job: JobRef, *, user_id: str | None = None) -> JobPublic:
        job_id = job_id_of(job)
        call = Call("GET", f"/jobs/{job_id}", params=compact(user_id=self._user(user_id)), result=JobPublic)
        return await self._send(call)

    async def wait(
        self,
        job: JobRef,
        *,
        on_progress: Callable[[JobPublic], None] | None = None,
        poll_interval: float = 0.5,
        timeout: float | None = None,
        user_id: str | None = None,
        check: bool = False,
    ) -> JobPublic:
        job_id, last = job_id_of(job), None
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        while True:
            current = await self.job(job_id, user_id=user_id)
            if on_progress is not None and moved(last, current):
                on_progress(current)
            last = current
            if current.status in JOB_ENDED:
                break
            if deadline is not None and asyncio.get_running_loop().time() >= deadline:
                raise WaitTimeout(f"job {job_id} is still {current.status} after {timeout:g} s", current)
            await asyncio.sleep(poll_interval)
        if check and current.status in ("failed", "cancelled"):
            raise JobFailed(f"job {job_id} {current.status}: {current.error or 'no error recorded'}", current)
        return current

    async def poll(self, group: JobGroup, *, max_calls: int = 50) -> JobGroup:
        unfinished = group.unfinished()
        for position, job_id in enumerate(unfinished[:max_calls]):
            job = await self.job(job_id, user_id=group.user_id)
            group.update(job)
            if job.status not in JOB_ENDED and position + 1 < len(unfinished):
                group.update(await self.job(unfinished[position + 1], user_id=group.user_id))
                break
        return group

    async def wait_all(
        self,
        jobs: Iterable[JobRef] | JobGroup,
        *,
        on_progress: Callable[[JobGroup], None] | None = None,
        poll_interval: float = 0.5,
        timeout: float | None = None,
        user_id: str | None = None,
        check: bool = False,
    ) -> list[JobPublic]:
        group = jobs if isinstance(jobs, JobGroup) else JobGroup(jobs, user_id=self._user(user_id))
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        seen: tuple[int, int, int] | None = None
        while True:
            await self.poll(group)
            state = (group.done, group.total, len(group.unfinished()))
            if on_progress is not None and state != seen:
                on_progress(group)
            seen = state
            if group.finished:
                break
            if deadline is not None and asyncio.get_running_loop().time() >= deadline:
                raise WaitTimeout(f"{state[2]} of {len(group)} jobs still open after {timeout:g} s", group)
            await asyncio.sleep(poll_interval)
        if check and group.failed:
            failed = group.failed[0]
            raise JobFailed(f"job {failed.id} {failed.status}: {failed.error or 'no error recorded'}", failed)
        return [job for job in group.jobs if job is not None]

    # -- operator (the operator key when keys are configured) -----------------------------------------------------

    async def decay(self, ratio: float | None = None) -> DecayRun:
        body = compact(ratio=ratio)
        return await self._send(Call("POST", "/maintenance/decay", json=body, result=DecayRun, idempotent=False))

    async def decay_run(self, run: DecayRun | Id) -> DecayRun:
        run_id = run.id if isinstance(run, DecayRun) else run
        return await self._send(Call("GET", f"/maintenance/decay/{run_id}", result=DecayRun))

    async def wait_decay(
        self,
        run: DecayRun | Id,
        *,
        on_progress: Callable[[DecayRun], None] | None = None,
        poll_interval: float = 0.5,
        timeout: float | None = None,
        check: bool = False,
    ) -> DecayRun:
        run_id = run.id if isinstance(run, DecayRun) else run
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        last: DecayRun | None = None
        while True:
            current = await self.decay_run(run_id)
            if on_progress is not None and decay_moved(last, current):
                on_progress(current)
            last = current
            if current.status in DECAY_ENDED:
                break
            if deadline is not None and asyncio.get_running_loop().time() >= deadline:
                raise WaitTimeout(f"decay run {run_id} is still {current.status} after {timeout:g} s", current)
            await asyncio.sleep(poll_interval)
        if check and current.status != "succeeded":
            raise JobFailed(f"decay run {run_id} {current.status}: {current.reason or 'no reason recorded'}", current)
        return current

    async def reembed(
        self, provider: str, *, dimensions: int | None = None, sectors: Sequence[str] | None = None
    ) -> ReembedAccepted:
        body = compact(provider=provider, dimensions=dimensions, sectors=sectors)
        call = Call("POST", "/maintenance/reembed", json=body, result=ReembedAccepted, idempotent=False)
        return await self._send(call)

    async def stats(self, *, runs: int = 10) -> dict[str, Any]:
        return dict(await self._send(Call("GET", "/maintenance/stats", params={"runs": runs})))

    async def embed_logs(
        self, *, limit: int = 100, status: Literal["completed", "failed"] | None = None
    ) -> dict[str, Any]:
        return dict(
            await self._send(Call("GET", "/maintenance/embed-logs", params=compact(limit=limit, status=status)))
        )

    # -- the data a tenant owns (docs/data.md) ----------------------------------------------------------------------

    async def cancel(self, job: JobRef, *, user_id: str | None = None) -> JobPublic:
        """Cancel a queued or running job: its remaining chunks are skipped, what it stored stays (each chunk whole),
        and it ends `cancelled` with its progress final. A job that has ended raises Conflict (409)."""
        job_id = job_id_of(job)
        params = compact(user_id=self._user(user_id))
        return await self._send(
            Call("POST", f"/jobs/{job_id}/cancel", params=params, result=JobPublic, idempotent=False)
        )

    async def delete_document(self, document_id: Id, *, user_id: str | None = None) -> dict[str, Any]:
        """Delete a document and every memory made from it (its ingestion is cancelled first if it still runs)."""
        params = compact(user_id=self._user(user_id))
        return dict(await self._send(Call("DELETE", f"/documents/{document_id}", params=params)))

    async def export(self, *, vectors: bool = True, user_id: str | None = None) -> AsyncIterator[bytes]:
        """The tenant's documents, memories and waypoints as JSON Lines (docs/data.md#the-export-format), a line at a
        time, each ending in a newline: a header first, an `end` line last (a file without one was cut short).
        `vectors`: carry each memory's vectors, re-used on import when the model matches. Streamed: not retried."""
        params = compact(vectors=str(vectors).lower(), user_id=self._user(user_id))
        async with self._http.stream("GET", "/export", params=params, timeout=None) as response:
            if response.status_code >= 400:
                await response.aread()
                core.answer(Call("GET", "/export"), response)
            async for line in response.aiter_lines():
                yield line.encode("utf-8") + b"\n"

    async def import_file(self, file: core.FileInput, *, user_id: str | None = None) -> ImportAccepted:
        """Import an export (a path, bytes or an open file of JSON Lines) into the tenant: checked whole first (a bad
        line refuses the file and writes nothing), then stored by a job (`wait` follows it). Importing a file twice
        stores nothing twice."""
        call = Call(
            "POST",
            "/import",
            params=compact(user_id=self._user(user_id)),
            body=core.raw_body(file),
            content_type="application/x-ndjson",
            result=ImportAccepted,
            timeout=None,
        )
        return await self._send(call)

    async def erase(self, user_id: str, *, wait: bool = False, timeout: float = 60.0) -> EraseAccepted:
        """Erase a tenant (operator): every memory, vector, waypoint, document, job and cached key of it, as a job
        (`wait` follows it; `wait=True` here lets the gateway wait up to `timeout` s first). Cannot be undone."""
        params = {"wait": str(wait).lower(), "timeout": timeout}
        call = Call("POST", "/maintenance/erase", params=params, json={"user_id": user_id}, result=EraseAccepted)
        return await self._send(call)
