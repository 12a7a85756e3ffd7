"""A job as the API shows it, read for the routes that answer with one (`/jobs/{id}`, documents, ingest, import)."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.orm import Session

from shared.api.jobs import JobPublic
from shared.jobs import JobKind
from shared.storage import jobs as job_store

DEDUPLICATED_SHOWN = 1_000  # a batch's items that an earlier memory held, listed in its job (all are counted)


def job_public(session: Session, job_id: uuid.UUID, tenant: str | None) -> JobPublic | None:
    """A job as the API shows it (its chunks' counters added to its result); None if not the tenant's."""
    job = job_store.get_job(session, job_id, tenant)
    if job is None:
        return None
    totals: dict[str, Any] = {**job_store.chunk_totals(session, job_id)}
    if job["kind"] == JobKind.BATCH:
        pairs, count = job_store.chunk_pairs(session, job_id, "deduplicated", DEDUPLICATED_SHOWN)
        if count:
            totals["deduplicated"] = [{"index": index, "id": memory_id} for index, memory_id in pairs]
            totals["deduplicated_truncated"] = count > len(pairs)
    return JobPublic(
        id=job["id"],
        kind=job["kind"],
        status=job["status"],
        progress={"done": job["progress_done"], "total": job["progress_total"]},
        attempts=job["attempts"],
        error=job["error"],
        result=job["result"] | totals,
        created_at=job["created_at"],
        updated_at=job["updated_at"],
        started_at=job["started_at"],
        finished_at=job["finished_at"],
    )
