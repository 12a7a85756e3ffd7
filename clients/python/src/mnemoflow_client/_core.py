"""What the sync and async clients share: settings, a call's description, JSON encoding, answers and errors, when
to retry, uploads, and the state of jobs being followed. No IO here: each client sends with its own httpx client."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import IO, Any, TypeAlias, TypeVar

import httpx
from pydantic import BaseModel

from .errors import MnemoflowError, TransportError, error_from_answer
from .retry import RETRY_STATUSES, RetryPolicy, parse_retry_after

__version__ = "0.1.0"
DEFAULT_URL = "http://127.0.0.1:8080"
Model = TypeVar("Model", bound=BaseModel)
# A document to upload: a path, its bytes, or an open binary file.
FileInput: TypeAlias = str | os.PathLike[str] | bytes | IO[bytes]
Id: TypeAlias = str | uuid.UUID
When: TypeAlias = datetime | str  # a datetime, or ISO 8601 text; UTC when it has no zone
# Connection failures in which nothing reached the gateway: safe to retry whatever the call.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass(frozen=True)
class Settings:
    """A client's settings, with the environment's defaults filled in."""

    base_url: str
    api_key: str | None
    user_id: str | None
    timeout: float
    retry: RetryPolicy
    headers: dict[str, str]

    @classmethod
    def resolve(
        cls,
        base_url: str | None,
        api_key: str | None,
        user_id: str | None,
        timeout: float,
        retry: RetryPolicy,
        headers: Mapping[str, str] | None,
    ) -> Settings:
        url = base_url or os.environ.get("MNEMOFLOW_URL") or DEFAULT_URL
        key = api_key if api_key is not None else (os.environ.get("MNEMOFLOW_API_KEY") or None)
        sent = {"User-Agent": f"mnemoflow-client/{__version__}", **(headers or {})}
        if key:
            sent["Authorization"] = f"Bearer {key}"
        return cls(url.rstrip("/"), key, user_id, timeout, retry, sent)


@dataclass
class Call:
    """One request: where, what, whether sending it twice is harmless, and what the answer is parsed into."""

    method: str
    path: str
    params: Mapping[str, Any] | None = None
    json: Any = None
    result: type[BaseModel] | None = None
    idempotent: bool = True
    timeout: float | None = None
    # statuses that are answers rather than errors (/health's 503: the stack is not ok), never retried
    answers: tuple[int, ...] = ()
    # a multipart upload, opened afresh for each attempt (an open file is rewound): (files, form fields)
    upload: Callable[[contextlib.ExitStack], tuple[dict[str, Any], dict[str, str]]] | None = None
    # a raw body (`POST /import`'s JSON Lines), opened afresh for each attempt, and its content type
    body: Callable[[contextlib.ExitStack], Any] | None = None
    content_type: str | None = None

    def request_args(self, stack: contextlib.ExitStack) -> dict[str, Any]:
        """httpx.request's arguments for one attempt."""
        args: dict[str, Any] = {"method": self.method, "url": self.path}
        if self.params:
            args["params"] = query_params(self.params)
        if self.json is not None:
            args["json"] = self.json
        if self.upload is not None:
            args["files"], args["data"] = self.upload(stack)
        if self.body is not None:
            args["content"] = self.body(stack)
            args["headers"] = {"content-type": self.content_type or "application/octet-stream"}
        if self.timeout is not None:
            args["timeout"] = self.timeout
        return args


def jsonable(value: Any) -> Any:
    """`value` as JSON can carry it: models dumped (unset fields left out), times in ISO 8601, UUIDs as text."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True, by_alias=True)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def compact(**fields: Any) -> dict[str, Any]:
    """A request body or query of the fields given (None: left out, so the server's default applies)."""
    return {name: jsonable(value) for name, value in fields.items() if value is not None}


def query_params(params: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Query parameters: None left out, lists repeated (`tags=a&tags=b`), booleans as true/false."""
    out: list[tuple[str, str]] = []
    for name, value in params.items():
        for one in value if isinstance(value, list | tuple) else [value]:
            if one is None:
                continue
            encoded = jsonable(one)
            out.append((name, ("true" if encoded else "false") if isinstance(encoded, bool) else str(encoded)))
    return out


def retry_delay(policy: RetryPolicy, call: Call, retry: int, answer: httpx.Response | Exception) -> float | None:
    """Seconds before trying `call` again (retry number `retry`, from 1) after this answer or failure; None: don't."""
    if isinstance(answer, Exception):
        if isinstance(answer, _NOT_SENT) or call.idempotent:
            return policy.delay(retry)
        return None
    if answer.status_code in RETRY_STATUSES and answer.status_code not in call.answers:
        return policy.delay(retry, parse_retry_after(answer.headers.get("retry-after")))
    return None


def retry_reason(answer: httpx.Response | Exception) -> str:
    if isinstance(answer, Exception):
        return f"{type(answer).__name__}: {answer}"
    return f"HTTP {answer.status_code}"


def transport_error(call: Call, base_url: str, exc: Exception) -> MnemoflowError:
    timed_out = isinstance(exc, httpx.TimeoutException)
    what = "did not answer in time" if timed_out else "could not be reached"
    return TransportError(
        f"{call.method} {call.path}: the gateway at {base_url} {what} ({type(exc).__name__}: {exc}); is it running? "
        "(MNEMOFLOW_URL)",
        code="timeout" if timed_out else "unreachable",
    )


def answer(call: Call, response: httpx.Response) -> Any:
    """The parsed answer of `call`, or the error it is (MnemoflowError and its subclasses)."""
    if response.status_code >= 400 and response.status_code not in call.answers:
        raise error_from_answer(
            response.status_code,
            response.content,
            response.headers,
            retry_after=parse_retry_after(response.headers.get("retry-after")),
        )
    if call.result is not None:
        return call.result.model_validate_json(response.content)
    return response.json()


def uploaded(
    file: FileInput, filename: str | None, content_type: str | None, fields: dict[str, str]
) -> Callable[[contextlib.ExitStack], tuple[dict[str, Any], dict[str, str]]]:
    """The multipart parts of an upload, made for each attempt: a path is opened (and closed after), bytes sent as
    they are, an open file rewound to where it was."""
    declared = content_type or "application/octet-stream"
    if isinstance(file, bytes):
        name = filename or "upload"
        return lambda stack: ({"file": (name, io.BytesIO(file), declared)}, fields)
    if isinstance(file, str | os.PathLike):
        path = Path(file)
        if not path.is_file():
            raise FileNotFoundError(f"no such file: {path}")
        name = filename or path.name
        return lambda stack: ({"file": (name, stack.enter_context(open(path, "rb")), declared)}, fields)
    stream = file
    start = stream.tell() if stream.seekable() else None
    name = filename or os.path.basename(str(getattr(stream, "name", "") or "")) or "upload"

    def parts(stack: contextlib.ExitStack) -> tuple[dict[str, Any], dict[str, str]]:
        if start is not None:
            stream.seek(start)
        return {"file": (name, stream, declared)}, fields

    return parts


def raw_body(file: FileInput) -> Callable[[contextlib.ExitStack], Any]:
    """A file sent as the request's body, made for each attempt: a path opened (and closed after), bytes as they are,
    an open file rewound to where it was (one that cannot be rewound is sent once)."""
    if isinstance(file, bytes):
        return lambda stack: file
    if isinstance(file, str | os.PathLike):
        path = Path(file)
        if not path.is_file():
            raise FileNotFoundError(f"no such file: {path}")
        return lambda stack: stack.enter_context(open(path, "rb"))
    stream = file
    start = stream.tell() if stream.seekable() else None

    def rewound(stack: contextlib.ExitStack) -> Any:
        if start is not None:
            stream.seek(start)
        return stream

    return rewound


def ingest_form(
    *,
    user_id: str | None,
    content_type: str | None,
    tags: Sequence[str] | None,
    metadata: Mapping[str, Any] | None,
    chunk_size: int | None,
    chunk_overlap: int | None,
    preserve_metadata: bool | None,
    occurred_at: datetime | str | None,
) -> dict[str, str]:
    """The form fields of `POST /memory/ingest/file` (metadata as JSON text, tags comma-separated)."""
    fields = {
        "user_id": user_id,
        "content_type": content_type,
        "tags": ",".join(tags) if tags else None,
        "metadata": json.dumps(jsonable(metadata)) if metadata else None,
        "chunk_size": chunk_size,
        "chunk_overlap": chunk_overlap,
        "preserve_metadata": None if preserve_metadata is None else str(preserve_metadata).lower(),
        "occurred_at": jsonable(occurred_at),
    }
    return {name: str(value) for name, value in fields.items() if value is not None}


def ingest_body(data: str | bytes, encoding: str | None) -> tuple[str, str | None]:
    """(`data`, `encoding`) of `POST /memory/ingest`: bytes go base64-encoded, text as it is."""
    if isinstance(data, bytes):
        return base64.b64encode(data).decode("ascii"), "base64"
    return data, encoding


def chunking(
    chunk_size: int | None, chunk_overlap: int | None, preserve_metadata: bool | None
) -> dict[str, Any] | None:
    return compact(chunk_size=chunk_size, chunk_overlap=chunk_overlap, preserve_metadata=preserve_metadata) or None


@dataclass
class Page:
    """Where the next page of a paginated list starts, and the ids of the last page (to pass over them again
    when newer rows pushed the list down meanwhile)."""

    offset: int = 0
    seen: set[uuid.UUID] = field(default_factory=set)

    def take(self, items: Sequence[Any], total: int, size: int) -> tuple[list[Any], bool]:
        """The items not yet returned, and whether another page may follow."""
        fresh = [item for item in items if item.id not in self.seen]
        self.seen = {item.id for item in items}
        self.offset += len(items)
        return fresh, bool(items) and len(items) == size and self.offset < total


def list_params(
    offset: int,
    limit: int,
    sector: str | None,
    tags: Sequence[str] | None,
    start_time: datetime | str | None,
    end_time: datetime | str | None,
    occurred_after: datetime | str | None,
    occurred_before: datetime | str | None,
) -> dict[str, Any]:
    """The query of `GET /memory/all` (OpenMemory's `u` and `l` for offset and limit)."""
    return compact(
        u=offset,
        l=limit,
        sector=sector,
        tags=list(tags) if tags else None,
        startTime=start_time,
        endTime=end_time,
        occurred_after=occurred_after,
        occurred_before=occurred_before,
    )


def query_body(
    query: str,
    *,
    k: int | None,
    user_id: str | None,
    filters: dict[str, Any],
    explain: bool,
    token_budget: int | None,
    diversity: float | None,
    recency_weight: float | None,
    reinforce: bool | None,
    retrieval: BaseModel | Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The body of `POST /memory/query`."""
    return compact(
        query=query,
        k=k,
        user_id=user_id,
        filters=filters or None,
        explain=explain or None,
        token_budget=token_budget,
        diversity=diversity,
        recency_weight=recency_weight,
        reinforce=reinforce,
        retrieval=retrieval,
    )


def copy_docstrings(target: type, source: type) -> None:
    """Give each public method of `target` without a docstring its namesake's in `source` (the async client's
    methods are the sync client's, awaited)."""
    for name in dir(target):
        method = getattr(target, name)
        if name.startswith("_") or not callable(method) or method.__doc__:
            continue
        twin = getattr(source, name, None)
        if twin is not None and twin.__doc__:
            method.__doc__ = twin.__doc__
