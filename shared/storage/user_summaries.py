"""SQL over user summaries: the stored summary of each tenant, and what of its memories a summary is built from."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

SUMMARY_COLUMNS = "user_id, summary, digest, memory_count, reflection_count, newest_memory_at, updated_at"


def get_summary(session: Session, user_id: str) -> dict[str, Any] | None:
    row = session.execute(
        text(f"SELECT {SUMMARY_COLUMNS} FROM user_summaries WHERE user_id = :user_id"), {"user_id": user_id}
    ).first()
    return dict(row._mapping) if row else None


def save_summary(
    session: Session,
    user_id: str,
    *,
    summary: str,
    digest: dict[str, Any],
    memory_count: int,
    reflection_count: int,
    newest_memory_at: datetime | None,
) -> dict[str, Any]:
    """Store (or replace) the tenant's summary; returns the row."""
    row = session.execute(
        text(
            f"""
            INSERT INTO user_summaries (user_id, summary, digest, memory_count, reflection_count, newest_memory_at)
            VALUES (:user_id, :summary, CAST(:digest AS jsonb), :memory_count, :reflection_count, :newest)
            ON CONFLICT (user_id) DO UPDATE SET summary = excluded.summary, digest = excluded.digest,
                memory_count = excluded.memory_count, reflection_count = excluded.reflection_count,
                newest_memory_at = excluded.newest_memory_at, updated_at = now()
            RETURNING {SUMMARY_COLUMNS}
            """
        ),
        {
            "user_id": user_id,
            "summary": summary,
            "digest": json.dumps(digest),
            "memory_count": memory_count,
            "reflection_count": reflection_count,
            "newest": newest_memory_at,
        },
    ).one()
    return dict(row._mapping)


def memory_fingerprint(session: Session, user_id: str) -> tuple[int, datetime | None]:
    """How many memories the tenant has and when the newest was stored: a summary built at another fingerprint is
    out of date (an add or a delete since). An index-only scan of (user_id, created_at)."""
    row = session.execute(
        text("SELECT count(*) AS n, max(created_at) AS newest FROM memories WHERE user_id = :user_id"),
        {"user_id": user_id},
    ).one()
    return int(row.n), row.newest


def summary_lines(session: Session, user_id: str, *, per_sector: int) -> list[dict[str, Any]]:
    """The tenant's `per_sector` most salient memories of each primary sector (active ones first, then the most
    recently seen): what a summary quotes and takes its terms from."""
    rows = session.execute(
        text(
            """
            SELECT id, content, primary_sector, salience FROM (
                SELECT id, content, primary_sector, salience, row_number() OVER (
                    PARTITION BY primary_sector
                    ORDER BY (status = 'active') DESC, salience DESC, last_seen_at DESC, id
                ) AS place
                FROM memories WHERE user_id = :user_id
            ) ranked
            WHERE place <= :per_sector
            ORDER BY primary_sector, place
            """
        ),
        {"user_id": user_id, "per_sector": per_sector},
    ).all()
    return [dict(r._mapping) for r in rows]
