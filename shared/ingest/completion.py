"""A document's last step, taken by the embed worker that stores its last chunk (or by the sweeper): its chunks
linked in reading order, the document done, its job succeeded; and the one log line per document."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from sqlalchemy.orm import Session

from shared.model.statuses import DocumentStatus, JobPhase, JobStatus
from shared.storage import documents as document_store
from shared.storage import jobs as job_store

# Stage timings the embed tasks add up per job (integers: chunk_totals sums them).
EMBED_STAGES = ("embed_ms", "store_ms")

log = logging.getLogger("mnemoflow.ingest")


def finish_document(session: Session, job_id: uuid.UUID) -> str:
    """Link the document's chunks in reading order, mark it done and its job succeeded; the job's status.

    Runs in the transaction that completed the job's last chunk (which holds the job row lock, so exactly
    one chunk sees none open), or from the sweeper when that step was lost. Idempotent either way.
    """
    document = document_store.document_of_job(session, job_id, lock=True)
    job = job_store.get_job(session, job_id)
    assert job is not None
    if document is None or document["status"] != DocumentStatus.EMBEDDING:
        return str(job["status"])
    links = document_store.link_reading_order(session, document["id"])
    totals = job_store.chunk_totals(session, job_id)
    stages = {**(document["meta"].get("stages_ms") or {}), **{k: totals.get(k, 0) for k in EMBED_STAGES}}
    document_store.set_status(session, document["id"], DocumentStatus.DONE, meta={"stages_ms": stages})
    result = {"phase": JobPhase.DONE, "chunks": document["chunk_count"], "stages_ms": stages, "next_links": links}
    job_store.finish_job(session, job_id, status=JobStatus.SUCCEEDED, result=result)
    log_document(document, outcome="done", chunks=document["chunk_count"], stages=stages)
    return JobStatus.SUCCEEDED


def log_document(document: dict[str, Any], *, outcome: str, chunks: int, stages: dict[str, Any]) -> None:
    """The one log line per document: outcome, format, bytes, chunks and per-stage milliseconds."""
    timing = " ".join(f"{name.removesuffix('_ms')}={int(ms)}ms" for name, ms in stages.items())
    log.info(
        "[ingest] document %s %s: format=%s bytes=%s chunks=%d %s",
        document["id"],
        outcome,
        document.get("format") or "?",
        document.get("byte_size") if document.get("byte_size") is not None else "?",
        chunks,
        timing,
    )
