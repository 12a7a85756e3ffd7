"""A tenant's open work, counted for its messages' broker priority (shared/backpressure.py): model windows in its
pending chunks, and its documents not yet parsed.

Cheap on purpose, it runs on every batch and document: the tenant's open jobs come from the partial index
jobs_open_user (migration 0026), their pending chunks by primary key, and both counts stop at the point where
the priority stops falling (`backpressure.SATURATION_WINDOWS`), so a tenant with a huge backlog costs no more.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session

from shared import backpressure


def open_windows(session: Session, user_id: str, *, at_most: int = backpressure.SATURATION_WINDOWS) -> int:
    """The tenant's open work in model windows, counted up to about `at_most`: its pending chunks' cost (their
    items, for chunks written before costs were kept) and `DOCUMENT_WINDOWS` per open job with nothing planned yet
    (a document waiting to be parsed)."""
    return int(
        session.execute(
            text(
                """
                WITH open AS MATERIALIZED (
                    SELECT id, progress_total FROM jobs
                    WHERE user_id = :user_id AND status IN ('queued', 'running')
                )
                SELECT
                    (SELECT COALESCE(sum(w), 0) FROM (
                        SELECT GREATEST(c.cost, c.item_count) AS w FROM open JOIN job_chunks c ON c.job_id = open.id
                        WHERE c.status = 'pending' LIMIT :at_most) chunks)
                  + :document * (SELECT count(*) FROM (
                        SELECT 1 FROM open WHERE progress_total = 0 LIMIT :documents) waiting)
                """
            ),
            {
                "user_id": user_id,
                "at_most": at_most,
                "document": backpressure.DOCUMENT_WINDOWS,
                "documents": -(-at_most // backpressure.DOCUMENT_WINDOWS),
            },
        ).scalar_one()
    )


def priority_of(session: Session, user_id: str, new_windows: int, *, fair: bool) -> int | None:
    """The broker priority of the tenant's next message, carrying `new_windows` of work not yet written; None
    (the transport's default, the highest) when fair queues are off (MNEMOFLOW_FAIR_QUEUES=0)."""
    if not fair:
        return None
    return backpressure.priority_for(open_windows(session, user_id) + new_windows)
