"""All SQL over user ids across tables: the stored ones that no longer fit the rule a request's user id follows."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from shared.api.common import USER_ID_PATTERN

# The tables that hold a tenant's rows (memory_vectors and term_stats follow memories, so they add nothing).
TENANT_TABLES = (
    "memories",
    "documents",
    "jobs",
    "waypoints",
    "conversation_heads",
    "tenant_stats",
    "user_summaries",
)
# Store-wide jobs belong to this name, which no request can use (shared.embedding.reembed.SYSTEM_TENANT).
_STORE_OWN = {"jobs": "_system"}
EXAMPLE_CHARS = 80


def nonconforming_user_ids(session: Session, *, examples: int = 5) -> dict[str, dict[str, Any]]:
    """Per table with any: rows whose user_id no request can name any more, how many such user ids, and a few of
    them (the most rows first, each cut at EXAMPLE_CHARS characters). A scan of each table."""
    report = {}
    for table in TENANT_TABLES:
        own = _STORE_OWN.get(table)
        rows = session.execute(
            text(
                f"SELECT user_id, count(*) AS n FROM {table} "
                "WHERE user_id !~ :pattern AND user_id IS DISTINCT FROM :own GROUP BY user_id ORDER BY n DESC, user_id"
            ),
            {"pattern": USER_ID_PATTERN, "own": own},
        ).all()
        if rows:
            report[table] = {
                "rows": sum(int(r.n) for r in rows),
                "user_ids": len(rows),
                "examples": [r.user_id[:EXAMPLE_CHARS] for r in rows[:examples]],
            }
    return report
