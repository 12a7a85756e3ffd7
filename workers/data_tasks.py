"""Thin tasks of the data a tenant owns (shared/data/): an import's chunks, an erasure's steps, its user summary."""

from __future__ import annotations

import uuid
from typing import Any

from celery import Task
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from shared.data import erasure, import_store
from shared.jobs import EraseTenant, ImportChunk, JobKind, RegenerateSummary
from shared.memory import summaries
from workers.app import app, context, redis_client, settings, store_wide
from workers.tasks import DATABASE_AWAY, _run_chunk, log, schedule_merge, send


@app.task(name=ImportChunk.task, bind=True, max_retries=None)
def import_chunk(self: Task, **kwargs: Any) -> dict[str, Any]:
    """Store one chunk of an import job (memories, or its waypoints once every memory is stored); the chunk that
    stores the last memories sends the waypoint chunks."""
    message = ImportChunk.received(kwargs)
    db, engine = context()

    def work(session: Session, job_id: uuid.UUID, seq: int, owner: str) -> import_store.ChunkOutcome | None:
        return import_store.store_chunk(engine, session, job_id, seq, owner)

    result, outcome = _run_chunk(self, message, work, purpose=JobKind.IMPORT, db=db.bound(message.user_id))
    if outcome is not None:
        # committed already: a lost message is re-sent by the sweeper
        send(
            *(
                ImportChunk(job_id=message.job_id, seq=seq, sector=s, user_id=message.user_id)
                for seq, s in outcome.release
            )
        )
        schedule_merge()
        result["job_status"] = outcome.status
    return result


@app.task(name=EraseTenant.task)
def erase_tenant(**kwargs: Any) -> dict[str, Any]:
    """One step of a tenant's erasure (shared/data/erasure.py); a step that runs out of time sends the next."""
    job_id = EraseTenant.received(kwargs).job_id
    db, _ = context()
    outcome = erasure.run_step(store_wide(), db, redis_client(), settings, job_id, budget=erasure.STEP_SECONDS)
    if outcome == "more":
        send(EraseTenant(job_id=job_id))
    return {"job_id": str(job_id), "outcome": outcome}


@app.task(name=RegenerateSummary.task, bind=True, max_retries=None)
def regenerate_summary(self: Task, **kwargs: Any) -> dict[str, Any]:
    """Rebuild a tenant's user summary; a duplicate or redelivered message finds the job claimed or closed."""
    message = RegenerateSummary.received(kwargs)
    db, _ = context()
    try:
        outcome = summaries.regenerate(
            db,
            message.job_id,
            message.user_id,
            settings.user_summary,
            lease_seconds=settings.job_lease_seconds,
            max_attempts=settings.job_max_attempts,
        )
    except DBAPIError as exc:  # the database is away: the job stays open, and this message tries again
        log.warning("[summary] job %s: database unreachable (%s); again in %ss", message.job_id, exc, DATABASE_AWAY)
        raise self.retry(exc=exc, countdown=DATABASE_AWAY) from exc
    if outcome.retry_in is not None:
        raise self.retry(countdown=outcome.retry_in)
    return {"job_id": str(message.job_id), "status": outcome.status}
