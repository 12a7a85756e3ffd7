"""SQL over embed_logs: one row per provider call (model, status, latency, error), totals, retention."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from shared.embedding.calls import EmbedCall


def log_embedding(
    session: Session, call: EmbedCall, *, purpose: str, job_id: uuid.UUID | None = None, synchronous: bool = True
) -> None:
    """One row of embed_logs for one provider call (model, status, latency, error); committed with the caller.

    synchronous=False lets the caller's commit skip waiting for the WAL flush (a query's log line is not
    worth a disk wait on the read path; a crash may lose the last few).
    """
    log_embeddings(session, [call], purpose=purpose, job_id=job_id, synchronous=synchronous)


def log_embeddings(
    session: Session,
    calls: Sequence[EmbedCall],
    *,
    purpose: str,
    job_id: uuid.UUID | None = None,
    synchronous: bool = True,
) -> None:
    """Rows of embed_logs for several calls of one purpose, in one statement."""
    if not calls:
        return
    if not synchronous:
        session.execute(text("SET LOCAL synchronous_commit = off"))
    session.execute(
        text(
            "INSERT INTO embed_logs (provider, model, status, item_count, latency_ms, error, job_id, purpose) "
            "VALUES (:provider, :model, :status, :count, :latency, :error, :job_id, :purpose)"
        ),
        [
            {
                "provider": call.provider,
                "model": call.model,
                "status": call.status,
                "count": call.item_count,
                "latency": call.latency_ms,
                "error": call.error,
                "job_id": job_id,
                "purpose": purpose,
            }
            for call in calls
        ],
    )


def recent_embed_logs(session: Session, *, limit: int, status: str | None) -> list[dict[str, Any]]:
    rows = session.execute(
        text(
            "SELECT id, provider, model, purpose, status, item_count, latency_ms, error, job_id, created_at "
            "FROM embed_logs WHERE (CAST(:status AS text) IS NULL OR status = :status) "
            "ORDER BY created_at DESC, id DESC LIMIT :limit"
        ),
        {"status": status, "limit": limit},
    ).all()
    return [dict(r._mapping) for r in rows]


def embed_log_totals(session: Session, *, hours: float) -> list[dict[str, Any]]:
    """Calls, items and latency percentiles per purpose and status over the last `hours`."""
    rows = session.execute(
        text(
            "SELECT purpose, status, count(*) AS calls, sum(item_count) AS items, "
            "percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_ms) AS p50_ms, "
            "percentile_cont(0.95) WITHIN GROUP (ORDER BY latency_ms) AS p95_ms "
            "FROM embed_logs WHERE created_at > now() - make_interval(secs => :secs) GROUP BY purpose, status "
            "ORDER BY purpose, status"
        ),
        {"secs": hours * 3600},
    ).all()
    return [
        {
            **dict(r._mapping),
            "items": int(r.items),
            "p50_ms": round(float(r.p50_ms), 3),
            "p95_ms": round(float(r.p95_ms), 3),
        }
        for r in rows
    ]


def prune_embed_logs(session: Session, *, older_than_days: float) -> int:
    """Delete embed_logs rows older than the retention period; returns how many."""
    result = session.execute(
        text("DELETE FROM embed_logs WHERE created_at < now() - make_interval(secs => :secs)"),
        {"secs": older_than_days * 86400},
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
