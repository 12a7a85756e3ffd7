"""A tenant's user summary (OpenMemory's `/users/{id}/summary`): built from its memories by `shared.memory.digest`,
stored in `user_summaries`, rebuilt when it is read after memories were added or deleted, and by a regeneration
job on the maintenance queue (`POST /users/{id}/summary/regenerate`).

Reading a summary that is up to date costs one row by key and an index-only count of the tenant's memories. An edit
of a memory's content keeps the count and the newest memory, so it shows in the summary at its next regeneration.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy.orm import Session

from shared.db import Database
from shared.errors import public_message
from shared.jobs import JobKind, RegenerateSummary
from shared.memory.digest import MemoryLine, SummaryParams, summarize
from shared.model.statuses import JobStatus
from shared.storage import jobs as job_store
from shared.storage import leases
from shared.storage import memories as memory_store
from shared.storage import user_summaries as summary_store

log = logging.getLogger("mnemoflow.summaries")


@dataclass(frozen=True)
class Regenerating:
    """A summary's regeneration asked for: its job, the message that starts it (None: one was already waiting, and
    it is that job), and the summary as it is stored now (None: never built)."""

    job_id: uuid.UUID
    message: RegenerateSummary | None
    stored: dict[str, Any] | None


def request_regeneration(session: Session, user_id: str) -> Regenerating:
    """A job that rebuilds the tenant's summary, unless one still waits (then that one); the caller sends
    `message` after its commit."""
    waiting = job_store.open_job_of(session, user_id, JobKind.SUMMARY)
    message = None
    if waiting is None:
        job_id, _ = job_store.create_job(
            session, user_id=user_id, kind=JobKind.SUMMARY, total=1, params={}, idempotency_key=None
        )
        message = RegenerateSummary(job_id=job_id, user_id=user_id)
    else:
        job_id = waiting["id"]
    return Regenerating(job_id, message, summary_store.get_summary(session, user_id))


def build(session: Session, user_id: str, params: SummaryParams) -> dict[str, Any]:
    """Build the tenant's summary from its memories now and store it; returns the stored row."""
    count, newest = summary_store.memory_fingerprint(session, user_id)
    counts = {row["sector"]: int(row["count"]) for row in memory_store.sector_stats(session, user_id)}
    lines = [
        MemoryLine(str(row["id"]), row["content"], row["primary_sector"], float(row["salience"]))
        for row in summary_store.summary_lines(session, user_id, per_sector=params.memories_per_sector)
    ]
    digest = summarize(lines, counts, params)
    return summary_store.save_summary(
        session,
        user_id,
        summary=digest.text,
        digest={"sectors": [asdict(s) for s in digest.sectors], "top_terms": list(digest.top_terms)},
        memory_count=count,
        reflection_count=digest.reflection_count,
        newest_memory_at=newest,
    )


def current(session: Session, user_id: str, params: SummaryParams) -> dict[str, Any]:
    """The tenant's stored summary when its memories have not been added to or deleted from since; else built now."""
    row = summary_store.get_summary(session, user_id)
    if row is not None and (row["memory_count"], row["newest_memory_at"]) == summary_store.memory_fingerprint(
        session, user_id
    ):
        return row
    return build(session, user_id, params)


@dataclass(frozen=True)
class Regeneration:
    """What one run of a regeneration job did: succeeded, skipped (closed or claimed elsewhere), failed, or retry
    (after `retry_in` seconds)."""

    status: str
    retry_in: float | None = None


def regenerate(
    db: Database, job_id: uuid.UUID, user_id: str, params: SummaryParams, *, lease_seconds: float, max_attempts: int
) -> Regeneration:
    """Run a regeneration job: claim it (the attempt counts), rebuild and store the summary and close the job in
    one transaction. A duplicate message finds the job claimed or closed and does nothing; a failure is retried
    with backoff until `max_attempts`, then fails the job with the reason."""
    owner = leases.owner_token()
    with db.session(user_id) as session:
        attempts = leases.claim_job(session, job_id, owner=owner, ttl=lease_seconds)
    if attempts is None:
        return Regeneration("skipped")
    try:
        with db.session(user_id) as session:
            row = build(session, user_id, params)
            result = {"memory_count": row["memory_count"], "reflection_count": row["reflection_count"]}
            job_store.finish_job(session, job_id, status=JobStatus.SUCCEEDED, result=result)
            leases.release_job(session, job_id, owner=owner)
    except Exception as exc:
        final = attempts >= max_attempts
        log.warning("summary job %s attempt %d failed%s: %s", job_id, attempts, " for good" if final else "", exc)
        with db.session(user_id) as session:
            leases.release_job(session, job_id, owner=owner)
            if final:
                job_store.finish_job(session, job_id, status=JobStatus.FAILED, error=public_message(exc))
        return Regeneration("failed") if final else Regeneration("retry", retry_in=min(60, 2**attempts))
    return Regeneration("succeeded")
