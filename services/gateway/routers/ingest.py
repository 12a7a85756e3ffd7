"""/memory/ingest, /memory/ingest/url, /memory/ingest/file: documents, web pages and audio for the ingest workers.

Each answers at once with the document and the job that processes it (202; 200 when that job has already
ended, e.g. with ?wait=true for a small document). Bad input is refused before anything is written: 413 over
MNEMOFLOW_INGEST_MAX_BYTES, 415 for bytes of an unsupported format or not of the declared one, 422 for a
URL that is malformed, does not resolve or points at a private address.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from fastapi import APIRouter, Request, Response, status
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from services.gateway import metrics
from services.gateway.deps import PrincipalDep, StateDep
from services.gateway.job_views import job_public
from services.gateway.state import GatewayState, UnitOfWork
from shared.api.common import USER_ID_PATTERN
from shared.api.ingest import IngestAccepted, IngestOptions, IngestRequest, IngestUrlRequest, form_params
from shared.api.jobs import JobPublic
from shared.backpressure import Quota
from shared.errors import InvalidInput, MnemoflowError, PayloadTooLarge, RateLimited
from shared.ingest import intake, sniff
from shared.jobs import JobKind
from shared.memory.storable import check_pairs, check_storable
from shared.model.statuses import DOCUMENT_ENDED, FINISHED_JOB

router = APIRouter(prefix="/memory", tags=["ingest"])
_UPLOAD_FORM = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "user_id": {"type": "string", "pattern": USER_ID_PATTERN},
                        "content_type": {"type": "string", "description": "declared type; default: the part's"},
                        "metadata": {"type": "string", "description": "a JSON object"},
                        "tags": {"type": "string", "description": "comma-separated"},
                        "chunk_size": {"type": "integer"},
                        "chunk_overlap": {"type": "integer"},
                        "preserve_metadata": {"type": "boolean"},
                        "occurred_at": {
                            "type": "string",
                            "format": "date-time",
                            "description": "when what it records happened (UTC if no zone)",
                        },
                    },
                }
            }
        },
    }
}


@router.post("/ingest", status_code=status.HTTP_202_ACCEPTED, response_model=IngestAccepted)
def ingest(
    body: IngestRequest, state: StateDep, principal: PrincipalDep, response: Response, wait: bool = False
) -> IngestAccepted:
    """Ingest a document sent in the body (OpenMemory's shape): text as is, binary formats base64-encoded."""
    user_id = principal.tenant(body.user_id)
    state.limiter.charge(user_id, Quota.INGEST)
    _check_options(state, body)
    try:
        intake.declared_format(body.content_type)  # an unknown format name is refused before decoding
        data = _decode(body, state.settings.ingest.max_bytes)
        fmt = sniff(data)
        intake.check_format(fmt, body.content_type)
    except MnemoflowError:
        metrics.DOCUMENTS_ACCEPTED.labels(format="unknown", outcome="refused").inc()
        raise
    with _backlog_counted(), state.unit_of_work(user_id) as work:
        accepted = _queued(
            state,
            work,
            user_id,
            intake.accept_upload(
                work.session,
                user_id=user_id,
                source=io.BytesIO(data),
                digest=hashlib.sha256(data).hexdigest(),
                size=len(data),
                fmt=fmt,
                filename=body.filename,
                declared_type=body.content_type,
                params=body.job_params(),
                max_queued=state.settings.ingest.max_queued,
            ),
        )
    return _answer(state, accepted, user_id, response, wait)


@router.post("/ingest/url", status_code=status.HTTP_202_ACCEPTED, response_model=IngestAccepted)
def ingest_url(
    body: IngestUrlRequest, state: StateDep, principal: PrincipalDep, response: Response, wait: bool = False
) -> IngestAccepted:
    """Ingest a web page or file by URL; the ingest worker fetches it (http/https, public addresses only)."""
    user_id = principal.tenant(body.user_id)
    state.limiter.charge(user_id, Quota.INGEST)
    _check_options(state, body)
    try:
        url = intake.normalize_url(body.url)
        intake.check_fetchable(url, state.settings.ingest)
    except MnemoflowError:
        metrics.DOCUMENTS_ACCEPTED.labels(format="url", outcome="refused").inc()
        raise
    with _backlog_counted(), state.unit_of_work(user_id) as work:
        accepted = intake.accept_url(
            work.session,
            user_id=user_id,
            url=url,
            params=body.job_params(),
            max_queued=state.settings.ingest.max_queued,
        )
        _queued(state, work, user_id, accepted)
    return _answer(state, accepted, user_id, response, wait)


@router.post(
    "/ingest/file", status_code=status.HTTP_202_ACCEPTED, response_model=IngestAccepted, openapi_extra=_UPLOAD_FORM
)
async def ingest_file(
    request: Request, state: StateDep, principal: PrincipalDep, response: Response, wait: bool = False
) -> IngestAccepted:
    """Upload a file (multipart field `file`); it is spooled to disk, never held whole in memory."""
    form = await request.form(max_files=1, max_fields=20)
    try:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise InvalidInput("send the document as a multipart/form-data file field named 'file'")
        fields = {key: value for key, value in form.items() if isinstance(value, str)}
        check_pairs(fields.items(), where="form field")  # a form the route reads itself: the dependency cannot
        try:
            options = form_params(fields)
        except (ValueError, ValidationError) as exc:
            raise InvalidInput(f"invalid upload options: {exc}") from exc
        # the metadata field is JSON: its escapes can spell a surrogate the field's own text does not hold
        check_storable({"metadata": options.metadata, "tags": options.tags}, where="form field")
        user_id = principal.tenant(options.user_id)
        await run_in_threadpool(state.limiter.charge, user_id, Quota.INGEST)
        _check_options(state, options)
        declared = fields.get("content_type") or upload.content_type
        filename = os.path.basename(upload.filename) if upload.filename else None
        # both are stored: PostgreSQL text cannot hold U+0000 (the part's headers may carry one)
        check_pairs((("content_type", declared or ""), ("filename", filename or "")), where="upload's")
        accepted = await run_in_threadpool(
            _accept_file, state, upload.file, user_id, filename, declared, options.job_params()
        )
    finally:
        await form.close()
    return await run_in_threadpool(_answer, state, accepted, user_id, response, wait)


def _check_options(state: GatewayState, options: IngestOptions) -> None:
    """Tags and metadata within limits; chunking that works with the server's defaults."""
    state.settings.limits.check_labels(options.tags, options.metadata, "metadata")
    try:
        options.config.sizes(state.settings.ingest.chunk_size, state.settings.ingest.chunk_overlap)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc


def _accept_file(
    state: GatewayState,
    source: IO[bytes],
    user_id: str,
    filename: str | None,
    declared: str | None,
    params: dict[str, Any],
) -> intake.Accepted:
    limit = state.settings.ingest.max_bytes
    with tempfile.NamedTemporaryFile(prefix="mnemoflow-upload-") as spool:
        digest, size = hashlib.sha256(), 0
        while block := source.read(intake.UPLOAD_PART_BYTES):
            size += len(block)
            if size > limit:
                raise _too_large(size, limit, more=True)
            digest.update(block)
            spool.write(block)
        spool.flush()
        if size == 0:
            raise InvalidInput("the uploaded file is empty")
        try:
            fmt = sniff(spool.name)
            intake.check_format(fmt, declared)
        except MnemoflowError:
            metrics.DOCUMENTS_ACCEPTED.labels(format="unknown", outcome="refused").inc()
            raise
        spool.seek(0)
        with _backlog_counted(), state.unit_of_work(user_id) as work:
            return _queued(
                state,
                work,
                user_id,
                intake.accept_upload(
                    work.session,
                    user_id=user_id,
                    source=spool,
                    digest=digest.hexdigest(),
                    size=size,
                    fmt=fmt,
                    filename=filename,
                    declared_type=declared,
                    params=params,
                    max_queued=state.settings.ingest.max_queued,
                ),
            )


def _decode(body: IngestRequest, limit: int) -> bytes:
    encoding = body.encoding or ("text" if intake.is_textual(body.content_type) else "base64")
    if encoding == "text":
        data = body.data.encode("utf-8")
    else:
        if len(body.data) * 3 // 4 > limit + 3:
            raise _too_large(len(body.data) * 3 // 4, limit)
        try:
            data = base64.b64decode(body.data, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidInput(
                f"data is not valid base64 ({exc}); send binary formats base64-encoded, or set encoding to 'text'"
            ) from exc
    if len(data) > limit:
        raise _too_large(len(data), limit)
    return data


def _too_large(size: int, limit: int, *, more: bool = False) -> PayloadTooLarge:
    what = f"more than {limit:,}" if more else f"{size:,}"
    return PayloadTooLarge(
        f"the document is {what} bytes; the limit is {limit:,} bytes (MNEMOFLOW_INGEST_MAX_BYTES)",
        details={"max_bytes": limit},
    )


@contextmanager
def _backlog_counted() -> Iterator[None]:
    """Count a document refused because its tenant's backlog is full (MNEMOFLOW_INGEST_MAX_QUEUED) among the 429s."""
    try:
        yield
    except RateLimited:
        metrics.RATE_LIMITED.labels(quota="queued_documents").inc()
        raise


def _queued(state: GatewayState, work: UnitOfWork, user_id: str, accepted: intake.Accepted) -> intake.Accepted:
    """Send the document's job once the acceptance commits (unless the document was already known), at the
    priority of its tenant's open work (this document's job, written, is counted in it)."""
    message = intake.ingest_message(work.session, user_id, accepted, fair=state.settings.fair_queues)
    if message is not None:
        work.enqueue(message)
        metrics.JOBS_ENQUEUED.labels(kind=JobKind.INGEST).inc()
    return accepted


def _answer(
    state: GatewayState, accepted: intake.Accepted, user_id: str, response: Response, wait: bool
) -> IngestAccepted:
    """Wait for the document's job if asked, and describe where to follow it."""
    metrics.DOCUMENTS_ACCEPTED.labels(format=accepted.fmt or "url", outcome=accepted.status).inc()
    job = None
    if wait and accepted.job_id is not None:
        job = _wait(state, accepted.job_id, user_id)
    ended = (job is not None and job.status in FINISHED_JOB) or (
        job is None and accepted.document_status in DOCUMENT_ENDED
    )
    if ended:
        response.status_code = status.HTTP_200_OK
    response.headers["Location"] = f"/documents/{accepted.document_id}"
    return IngestAccepted(
        job_id=accepted.job_id,
        document_id=accepted.document_id,
        status=accepted.status,  # type: ignore[arg-type]
        document_status=accepted.document_status,
        format=accepted.fmt,
        status_url=f"/jobs/{accepted.job_id}" if accepted.job_id else None,
        document_url=f"/documents/{accepted.document_id}",
        job=job,
    )


def _wait(state: GatewayState, job_id: uuid.UUID, user_id: str) -> JobPublic | None:
    """The job once it ends, or as it is when MNEMOFLOW_INGEST_WAIT_MAX_SECONDS have passed."""
    deadline = time.monotonic() + state.settings.ingest.wait_max_seconds
    while True:
        with state.db.reading(user_id) as session:
            job = job_public(session, job_id, user_id)
        if job is None or job.status in FINISHED_JOB or time.monotonic() >= deadline:
            return job
        time.sleep(0.25)
