"""What an ingest step ends with (`IngestOutcome`), and how an attempt fails: for good (bad input, or its attempts
spent), or queued again for a retry.

A 4xx-class error (corrupt, unsupported, mislabelled, over a parser limit, refused address, HTTP 4xx from the site)
will not change on a retry; anything else (network, the site's timeouts, the database) may.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from shared.config import Settings
from shared.errors import MnemoflowError, UpstreamFailed
from shared.ingest.completion import log_document
from shared.jobs import StoreChunk
from shared.model.statuses import DocumentStatus, JobPhase, JobStatus
from shared.storage import documents as document_store
from shared.storage import jobs as job_store

# Site answers that a retry may well change.
_TRANSIENT_HTTP = frozenset({408, 425, 429})


@dataclass
class IngestOutcome:
    """What one run did, and what the task must do next (enqueue chunks, or retry after `retry_in` s)."""

    status: str  # planned, finished, duplicate, failed, retry, skipped, cancelled
    chunks: list[StoreChunk] = field(default_factory=list)  # to send, now that they are committed
    retry_in: float | None = None
    error: str | None = None
    fmt: str | None = None  # the document's format, once sniffed
    stages_ms: dict[str, int] = field(default_factory=dict)  # what this step's stages took (fetch, extract, …)
    # The outcomes of the tenant's small uploads claimed with this one and parsed in the same child (their chunks
    # are sent with this step's; a retry of theirs is left to the sweeper, as a lost message is).
    companions: list[IngestOutcome] = field(default_factory=list)


def is_final(exc: Exception) -> bool:
    """Whether an error will come back on every attempt (bad input), rather than pass (network, load)."""
    if isinstance(exc, UpstreamFailed):
        status = (exc.details or {}).get("status") if isinstance(exc.details, dict) else None
        return isinstance(status, int) and 400 <= status < 500 and status not in _TRANSIENT_HTTP
    return isinstance(exc, MnemoflowError) and exc.status_code < 500


def record(
    session: Any,
    settings: Settings,
    document: dict[str, Any],
    job_id: uuid.UUID,
    attempts: int,
    exc: Exception,
    stages: dict[str, int],
) -> IngestOutcome:
    """A failed attempt, in the caller's transaction: the document failed when the error will come back (or its
    attempts are spent), else queued again for a retry."""
    message = exc.message if isinstance(exc, MnemoflowError) else f"{type(exc).__name__}: {exc}"
    if is_final(exc) or attempts >= settings.job_max_attempts:
        fail(session, document, job_id, message, stages)
        return IngestOutcome("failed", error=message, stages_ms=stages)
    # Back to queued, the lease given back: if the retry's message is lost too, the sweeper's "sent but never
    # claimed" rule finds it.
    document_store.set_status(session, document["id"], DocumentStatus.QUEUED, error=message)
    job_store.merge_result(session, job_id, {"phase": JobPhase.RETRYING, "attempt": attempts}, error=message)
    return IngestOutcome("retry", retry_in=min(60.0, 2.0**attempts), error=message, stages_ms=stages)


def fail(session: Any, document: dict[str, Any], job_id: uuid.UUID, message: str, stages: dict[str, int]) -> None:
    document_store.set_status(session, document["id"], DocumentStatus.FAILED, error=message, meta={"stages_ms": stages})
    document_store.delete_upload(session, document["id"])
    job_store.finish_job(
        session, job_id, status=JobStatus.FAILED, result={"phase": JobPhase.FAILED, "stages_ms": stages}, error=message
    )
    log_document(document, outcome=f"failed ({message})", chunks=0, stages=stages)
