"""All SQL of cancelling a job: the job, its pending chunks, its document; and the chunks a cancel left behind.

The job row's lock orders a cancel against the chunks being stored: a chunk's transaction advances its job last
(`jobs.complete_chunk`), so either it holds the row first and commits before the cancel goes on, or it waits for
the cancel and then finds the job cancelled and rolls back whatever it stored. Chunks a worker holds are skipped
here, not waited for (that worker waits for the job row: waiting for it here would be a deadlock); each closes
itself. The document is a second transaction: the ingest worker locks a document before its job, this the other
way round, and one lock per transaction cannot deadlock.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from shared.storage.jobs import JOB_COLUMNS


def cancel_job(session: Session, job_id: uuid.UUID) -> dict[str, Any] | None:
    """Mark an open job cancelled and every pending chunk no worker holds now; the job as it is then, with
    `cancelled_chunks`. None when the job is not open (finished, cancelled, or not the session's tenant's)."""
    row = session.execute(
        text(
            f"""
            UPDATE jobs SET status = 'cancelled', finished_at = now(), updated_at = now(), lease_owner = NULL,
                   lease_until = NULL, result = result || '{{"phase": "cancelled"}}'::jsonb
            WHERE id = :id AND status IN ('queued', 'running')
            RETURNING {JOB_COLUMNS}
            """
        ),
        {"id": job_id},
    ).first()
    if row is None:
        return None
    closed = session.execute(
        text(
            """
            UPDATE job_chunks c SET status = 'cancelled', items = '[]', lease_owner = NULL, lease_until = NULL
            FROM (SELECT job_id, seq FROM job_chunks WHERE job_id = :id AND status = 'pending'
                  FOR UPDATE SKIP LOCKED) AS k
            WHERE c.job_id = k.job_id AND c.seq = k.seq
            """
        ),
        {"id": job_id},
    )
    return dict(row._mapping) | {"cancelled_chunks": int(closed.rowcount or 0)}  # type: ignore[attr-defined]


def cancel_document(session: Session, job_id: uuid.UUID) -> uuid.UUID | None:
    """The document of a cancelled ingest job ends cancelled (unless it had ended already), its staged upload
    dropped; its id, None when there is none to change."""
    document_id = session.execute(
        text(
            "UPDATE documents SET status = 'cancelled', error = 'cancelled', updated_at = now() "
            "WHERE job_id = :job AND status IN ('queued', 'extracting', 'embedding') RETURNING id"
        ),
        {"job": job_id},
    ).scalar_one_or_none()
    if document_id is not None:
        session.execute(text("DELETE FROM document_uploads WHERE document_id = :id"), {"id": document_id})
    return document_id


def lock_job_status(session: Session, job_id: uuid.UUID) -> str | None:
    """The job's status, its row locked until the transaction ends (a cancel waits for it, or came first)."""
    status = session.execute(
        text("SELECT status FROM jobs WHERE id = :id FOR UPDATE"), {"id": job_id}
    ).scalar_one_or_none()
    return None if status is None else str(status)


def cancel_chunk(session: Session, job_id: uuid.UUID, seq: int) -> None:
    """A worker found its chunk's job cancelled: the chunk ends cancelled, nothing of it stored."""
    session.execute(
        text(
            "UPDATE job_chunks SET status = 'cancelled', items = '[]', lease_owner = NULL, lease_until = NULL "
            "WHERE job_id = :job_id AND seq = :seq AND status = 'pending'"
        ),
        {"job_id": job_id, "seq": seq},
    )


def close_cancelled_chunks(session: Session, *, limit: int = 1000) -> int:
    """Pending chunks of cancelled jobs that no worker holds: the ones whose worker died between its claim and its
    last check (a live one closes its own). Cancelled, never re-sent; how many."""
    result = session.execute(
        text(
            """
            UPDATE job_chunks c SET status = 'cancelled', items = '[]', lease_owner = NULL, lease_until = NULL
            FROM (SELECT c.job_id, c.seq FROM job_chunks c JOIN jobs j ON j.id = c.job_id
                  WHERE c.status = 'pending' AND j.status = 'cancelled'
                    AND (c.lease_until IS NULL OR c.lease_until < now())
                  LIMIT :limit FOR UPDATE OF c SKIP LOCKED) AS k
            WHERE c.job_id = k.job_id AND c.seq = k.seq
            """
        ),
        {"limit": limit},
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
