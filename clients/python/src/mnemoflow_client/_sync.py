"""The synchronous client's transport (settings, retries, any route), the system routes, jobs and the operator's
routes; `client.Mnemoflow` adds the memory, query, document and ingest routes."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
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


class SyncBase:
    """The transport and the routes of jobs and operators, for `Mnemoflow` (read its docstring)."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        user_id: str | None = None,
        timeout: float = 30.0,
        retries: int | RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        self.settings = core.Settings.resolve(base_url, api_key, user_id, timeout, as_policy(retries), headers)
        self._http = http_client or httpx.Client(
            base_url=self.settings.base_url, headers=self.settings.headers, timeout=timeout
        )
        self._own_http = http_client is None

    def close(self) -> None:
        """Close the connections (a client made with `http_client` leaves that one open)."""
        if self._own_http:
            self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.settings.base_url!r}, user_id={self.settings.user_id!r})"

    # -- sending -------------------------------------------------------------------------------------------------

    def _user(self, user_id: str | None) -> str | None:
        return user_id if user_id is not None else self.settings.user_id

    def _send(self, call: Call) -> Any:
        """Send `call`, retrying as the policy says; its parsed answer, or the MnemoflowError it is."""
        policy, retry = self.settings.retry, 0
        while True:
            outcome: httpx.Response | Exception
            with contextlib.ExitStack() as stack:
                try:
                    outcome = self._http.request(**call.request_args(stack))
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
            time.sleep(delay)

    @overload
    def request(
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
    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = ...,
        json: Any = ...,
        result: None = ...,
        idempotent: bool | None = ...,
    ) -> Any: ...

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        result: type[BaseModel] | None = None,
        idempotent: bool | None = None,
    ) -> Any:
        """Call any route: for routes this client has no method for yet. `result` parses the answer into a model
        (else it is the decoded JSON); `idempotent` (default: every method but POST) allows retrying after a
        connection broke mid-way. Errors raise as for every method."""
        safe = method.upper() != "POST" if idempotent is None else idempotent
        body = core.jsonable(json) if json is not None else None
        return self._send(Call(method.upper(), path, params=params, json=body, result=result, idempotent=safe))

    # -- system ---------------------------------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """Whether the database, the broker and the workers are up (`ok`); with a key, also the version and the
        embedding model. A stack that is down answers `ok: false` (503) without retrying, rather than raising."""
        return dict(self._send(Call("GET", "/health", answers=(503,))))

    def sectors(self, *, user_id: str | None = None) -> dict[str, Any]:
        """The five sectors and their settings, and the tenant's counts, salience, tiers and query statistics."""
        return dict(self._send(Call("GET", "/sectors", params=compact(user_id=self._user(user_id)))))

    # -- documents -------------------------------------------------------------------------------------------------

    def documents(
        self,
        *,
        status: str | None = None,
        offset: int = 0,
        limit: int = 50,
        user_id: str | None = None,
    ) -> DocumentPage:
        """One page of the tenant's documents, newest first (`limit` up to 500), optionally of one `status`
        (queued, extracting, embedding, done, failed, duplicate). `iter_documents` pages through them all."""
        params = compact(status=status, offset=offset, limit=limit, user_id=self._user(user_id))
        return self._send(Call("GET", "/documents", params=params, result=DocumentPage))

    def iter_documents(
        self, *, status: str | None = None, user_id: str | None = None, page_size: int = 200
    ) -> Iterator[DocumentPublic]:
        """Every document `documents` would list, a page at a time."""
        page = core.Page()
        while True:
            answer = self.documents(status=status, offset=page.offset, limit=page_size, user_id=user_id)
            fresh, more = page.take(answer.items, answer.total, page_size)
            yield from fresh
            if not more:
                return

    def document(
        self, document_id: Id, *, offset: int = 0, limit: int = 100, user_id: str | None = None
    ) -> DocumentDetail:
        """One document: status, source, format, chunk count, error, metadata, its job, and its memories in reading
        order (`offset`/`limit` page through them, up to 1,000)."""
        params = compact(offset=offset, limit=limit, user_id=self._user(user_id))
        return self._send(Call("GET", f"/documents/{document_id}", params=params, result=DocumentDetail))

    # -- jobs -----------------------------------------------------------------------------------------------------

    def job(self, job: JobRef, *, user_id: str | None = None) -> JobPublic:
        """A job's status, progress (`done`/`total`), attempts, error and result."""
        job_id = job_id_of(job)
        call = Call("GET", f"/jobs/{job_id}", params=compact(user_id=self._user(user_id)), result=JobPublic)
        return self._send(call)

    def wait(
        self,
        job: JobRef,
        *,
        on_progress: Callable[[JobPublic], None] | None = None,
        poll_interval: float = 0.5,
        timeout: float | None = None,
        user_id: str | None = None,
        check: bool = False,
    ) -> JobPublic:
        """Poll a job until it has ended (succeeded, failed or cancelled), and return its last state.

        `job`: its id, or the answer that started it (`batch`, `ingest_*`, `reembed`). `on_progress(job)` is called
        whenever its status or progress changed (and once at the start). `timeout` (seconds; none by default)
        raises WaitTimeout; `check=True` raises JobFailed for a failed or cancelled job."""
        job_id, last = job_id_of(job), None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            current = self.job(job_id, user_id=user_id)
            if on_progress is not None and moved(last, current):
                on_progress(current)
            last = current
            if current.status in JOB_ENDED:
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"job {job_id} is still {current.status} after {timeout:g} s", current)
            time.sleep(poll_interval)
        if check and current.status in ("failed", "cancelled"):
            raise JobFailed(f"job {job_id} {current.status}: {current.error or 'no error recorded'}", current)
        return current

    def poll(self, group: JobGroup, *, max_calls: int = 50) -> JobGroup:
        """One round of following a `JobGroup`: the oldest unfinished job, the next ones while those asked about
        have ended (so the group never lags behind), and one more; returns the group, updated."""
        unfinished = group.unfinished()
        for position, job_id in enumerate(unfinished[:max_calls]):
            job = self.job(job_id, user_id=group.user_id)
            group.update(job)
            if job.status not in JOB_ENDED and position + 1 < len(unfinished):
                group.update(self.job(unfinished[position + 1], user_id=group.user_id))
                break
        return group

    def wait_all(
        self,
        jobs: Iterable[JobRef] | JobGroup,
        *,
        on_progress: Callable[[JobGroup], None] | None = None,
        poll_interval: float = 0.5,
        timeout: float | None = None,
        user_id: str | None = None,
        check: bool = False,
    ) -> list[JobPublic]:
        """Wait for many jobs (in the order they were started), and return their last states in that order.

        `on_progress(group)` sees the `JobGroup`: `done` and `total` items across the jobs, and each job's state.
        `timeout` raises WaitTimeout; `check=True` raises JobFailed for the first failed job."""
        group = jobs if isinstance(jobs, JobGroup) else JobGroup(jobs, user_id=self._user(user_id))
        deadline = None if timeout is None else time.monotonic() + timeout
        seen: tuple[int, int, int] | None = None
        while True:
            self.poll(group)
            state = (group.done, group.total, len(group.unfinished()))
            if on_progress is not None and state != seen:
                on_progress(group)
            seen = state
            if group.finished:
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"{state[2]} of {len(group)} jobs still open after {timeout:g} s", group)
            time.sleep(poll_interval)
        if check and group.failed:
            failed = group.failed[0]
            raise JobFailed(f"job {failed.id} {failed.status}: {failed.error or 'no error recorded'}", failed)
        return [job for job in group.jobs if job is not None]

    # -- operator (the operator key when keys are configured) -----------------------------------------------------

    def decay(self, ratio: float | None = None) -> DecayRun:
        """Start a decay cycle now (operator): re-tier, decay salience, compress and fingerprint unused memories.
        `ratio`: the share of each sector to walk (1.0: every memory; default OM_DECAY_RATIO). `wait_decay` follows
        it. Never retried after a broken connection (a second run would start)."""
        body = compact(ratio=ratio)
        return self._send(Call("POST", "/maintenance/decay", json=body, result=DecayRun, idempotent=False))

    def decay_run(self, run: DecayRun | Id) -> DecayRun:
        """One decay cycle's status and counts so far (`processed` of `planned`, changed, tiers, compressed)."""
        run_id = run.id if isinstance(run, DecayRun) else run
        return self._send(Call("GET", f"/maintenance/decay/{run_id}", result=DecayRun))

    def wait_decay(
        self,
        run: DecayRun | Id,
        *,
        on_progress: Callable[[DecayRun], None] | None = None,
        poll_interval: float = 0.5,
        timeout: float | None = None,
        check: bool = False,
    ) -> DecayRun:
        """Poll a decay cycle until it has succeeded, been skipped or failed; as `wait` (`check=True` raises JobFailed
        for a skipped or failed run)."""
        run_id = run.id if isinstance(run, DecayRun) else run
        deadline = None if timeout is None else time.monotonic() + timeout
        last: DecayRun | None = None
        while True:
            current = self.decay_run(run_id)
            if on_progress is not None and decay_moved(last, current):
                on_progress(current)
            last = current
            if current.status in DECAY_ENDED:
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"decay run {run_id} is still {current.status} after {timeout:g} s", current)
            time.sleep(poll_interval)
        if check and current.status != "succeeded":
            raise JobFailed(f"decay run {run_id} {current.status}: {current.reason or 'no reason recorded'}", current)
        return current

    def reembed(
        self, provider: str, *, dimensions: int | None = None, sectors: Sequence[str] | None = None
    ) -> ReembedAccepted:
        """Re-embed the store with another provider (operator): synthetic, local, static, openai or ollama
        (`dimensions` for HTTP providers; `sectors` for some only). Follow it with `wait`; when it has succeeded,
        restart the stack with `restart_with`. Never retried after a broken connection."""
        body = compact(provider=provider, dimensions=dimensions, sectors=sectors)
        call = Call("POST", "/maintenance/reembed", json=body, result=ReembedAccepted, idempotent=False)
        return self._send(call)

    def stats(self, *, runs: int = 10) -> dict[str, Any]:
        """The store's lifecycle (operator): tiers, compression, mean salience, settings, the last `runs` decays."""
        return dict(self._send(Call("GET", "/maintenance/stats", params={"runs": runs})))

    def embed_logs(self, *, limit: int = 100, status: Literal["completed", "failed"] | None = None) -> dict[str, Any]:
        """The embedder's recent calls, newest first, and the last 24 hours' totals per purpose (operator)."""
        return dict(self._send(Call("GET", "/maintenance/embed-logs", params=compact(limit=limit, status=status))))

    # -- the data a tenant owns (docs/data.md) ----------------------------------------------------------------------

    def cancel(self, job: JobRef, *, user_id: str | None = None) -> JobPublic:
        """Cancel a queued or running job: its remaining chunks are skipped, what it stored stays (each chunk whole),
        and it ends `cancelled` with its progress final. A job that has ended raises Conflict (409)."""
        job_id = job_id_of(job)
        params = compact(user_id=self._user(user_id))
        return self._send(Call("POST", f"/jobs/{job_id}/cancel", params=params, result=JobPublic, idempotent=False))

    def delete_document(self, document_id: Id, *, user_id: str | None = None) -> dict[str, Any]:
        """Delete a document and every memory made from it (its ingestion is cancelled first if it still runs)."""
        params = compact(user_id=self._user(user_id))
        return dict(self._send(Call("DELETE", f"/documents/{document_id}", params=params)))

    def export(self, *, vectors: bool = True, user_id: str | None = None) -> Iterator[bytes]:
        """The tenant's documents, memories and waypoints as JSON Lines (docs/data.md#the-export-format), a line at a
        time, each ending in a newline: a header first, an `end` line last (a file without one was cut short).
        `vectors`: carry each memory's vectors, re-used on import when the model matches. Streamed: not retried."""
        params = compact(vectors=str(vectors).lower(), user_id=self._user(user_id))
        with self._http.stream("GET", "/export", params=params, timeout=None) as response:
            if response.status_code >= 400:
                response.read()
                core.answer(Call("GET", "/export"), response)
            for line in response.iter_lines():
                yield line.encode("utf-8") + b"\n"

    def import_file(self, file: core.FileInput, *, user_id: str | None = None) -> ImportAccepted:
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
        return self._send(call)

    def erase(self, user_id: str, *, wait: bool = False, timeout: float = 60.0) -> EraseAccepted:
        """Erase a tenant (operator): every memory, vector, waypoint, document, job and cached key of it, as a job
        (`wait` follows it; `wait=True` here lets the gateway wait up to `timeout` s first). Cannot be undone."""
        params = {"wait": str(wait).lower(), "timeout": timeout}
        call = Call("POST", "/maintenance/erase", params=params, json={"user_id": user_id}, result=EraseAccepted)
        return self._send(call)
