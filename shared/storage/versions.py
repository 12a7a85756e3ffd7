"""SQL over versions of a fact: `supersedes` waypoints, the older memory's `valid_to`, and `memory_history`.

A memory is superseded while at least one `supersedes` waypoint points at it: its status says so and `valid_to` is
when it stopped being current (the time of what replaced it). Take the last such link away (the link deleted, or the
newer memory) and it is current again. Every change is a row of `memory_history`. Functions flush; the caller's
boundary commits.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from shared.storage.rows import occurred_sql

SUPERSEDES = "supersedes"


@dataclass(frozen=True)
class Change:
    """One row of a memory's history."""

    event: str  # content | superseded | supersedes | restored | merged
    at: datetime
    other_id: uuid.UUID | None
    content: str | None
    detail: dict[str, Any]


def record(
    session: Session,
    user_id: str,
    rows: Sequence[tuple[uuid.UUID, str, uuid.UUID | None, str | None, dict[str, Any]]],
) -> None:
    """Append changes: (memory id, event, other memory, content kept, detail) each."""
    if not rows:
        return
    session.execute(
        text(
            "INSERT INTO memory_history (memory_id, user_id, event, other_id, content, detail) "
            "SELECT r.memory_id, :user_id, r.event, r.other_id, r.content, r.detail "
            "FROM unnest(CAST(:ids AS uuid[]), CAST(:events AS text[]), CAST(:others AS uuid[]), "
            "CAST(:contents AS text[]), CAST(:details AS jsonb[])) WITH ORDINALITY "
            "AS r(memory_id, event, other_id, content, detail, ord) "
            "WHERE EXISTS (SELECT 1 FROM memories m WHERE m.id = r.memory_id AND m.user_id = :user_id) "
            # a semi-join may hand rows on in another order; the history's ids keep the order given
            "ORDER BY r.ord"
        ),
        {
            "user_id": user_id,
            "ids": [r[0] for r in rows],
            "events": [r[1] for r in rows],
            "others": [r[2] for r in rows],
            "contents": [r[3] for r in rows],
            "details": [json.dumps(r[4]) for r in rows],
        },
    )


def history(session: Session, user_id: str, memory_id: uuid.UUID) -> list[Change]:
    """A memory's changes, oldest first."""
    rows = session.execute(
        text(
            "SELECT event, at, other_id, content, detail FROM memory_history "
            "WHERE memory_id = :id AND user_id = :user_id ORDER BY id"
        ),
        {"id": memory_id, "user_id": user_id},
    ).all()
    return [Change(r.event, r.at, r.other_id, r.content, dict(r.detail)) for r in rows]


def supersede(
    session: Session,
    user_id: str,
    pairs: Sequence[tuple[uuid.UUID, uuid.UUID]],
    *,
    by: str,
    weight: float = 1.0,
    detail: dict[str, Any] | None = None,
) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """Record that each (newer, older) replaces the older: the `supersedes` waypoint, the older memory's status and
    `valid_to` (the newer one's time, never before the older one's own), both histories. `by` (who decided: "client",
    "write") and `detail` (why) go into the histories. Pairs whose memories are not both the tenant's, or that are
    linked already, are skipped; returns the pairs recorded."""
    if not pairs:
        return []
    made = session.execute(
        text(
            """
            INSERT INTO waypoints (src_id, dst_id, user_id, kind, weight)
            SELECT p.newer, p.older, :user_id, 'supersedes', :weight
            FROM unnest(CAST(:newer AS uuid[]), CAST(:older AS uuid[])) AS p(newer, older)
            WHERE p.newer <> p.older
              AND (SELECT count(*) FROM memories WHERE id IN (p.newer, p.older) AND user_id = :user_id) = 2
            ON CONFLICT (src_id, dst_id, kind) DO NOTHING
            RETURNING src_id, dst_id
            """
        ),
        {"user_id": user_id, "newer": [n for n, _ in pairs], "older": [o for _, o in pairs], "weight": weight},
    ).all()
    recorded = [(r.src_id, r.dst_id) for r in made]
    if not recorded:
        return []
    session.execute(
        text(
            f"""
            UPDATE memories o SET status = 'superseded', updated_at = now(), version = o.version + 1,
                   valid_to = GREATEST({occurred_sql("o")}, p.since)
            FROM (
                SELECT p.older, min({occurred_sql("n")}) AS since
                FROM unnest(CAST(:newer AS uuid[]), CAST(:older AS uuid[])) AS p(newer, older)
                JOIN memories n ON n.id = p.newer AND n.user_id = :user_id
                GROUP BY p.older
            ) p
            WHERE o.id = p.older AND o.user_id = :user_id
            """
        ),
        {"user_id": user_id, "newer": [n for n, _ in recorded], "older": [o for _, o in recorded]},
    )
    detail = {"by": by, **(detail or {})}
    record(
        session,
        user_id,
        [(older, "superseded", newer, None, detail) for newer, older in recorded]
        + [(newer, "supersedes", older, None, detail) for newer, older in recorded],
    )
    return recorded


def successors_of(session: Session, user_id: str, memory_id: uuid.UUID) -> list[uuid.UUID]:
    """The memories a memory supersedes (the ones to look at again when it goes)."""
    rows = session.execute(
        text("SELECT dst_id FROM waypoints WHERE src_id = :id AND user_id = :user_id AND kind = 'supersedes'"),
        {"id": memory_id, "user_id": user_id},
    ).scalars()
    return list(rows)


def unlink(session: Session, user_id: str, newer: uuid.UUID, older: uuid.UUID) -> bool:
    """Delete a `supersedes` waypoint; the older memory is current again unless another still supersedes it."""
    gone = session.execute(
        text(
            "DELETE FROM waypoints WHERE src_id = :newer AND dst_id = :older AND user_id = :user_id "
            "AND kind = 'supersedes' RETURNING dst_id"
        ),
        {"newer": newer, "older": older, "user_id": user_id},
    ).first()
    if gone is None:
        return False
    restore(session, user_id, [older], because=newer, reason="link deleted")
    return True


def restore(session: Session, user_id: str, older: Sequence[uuid.UUID], *, because: uuid.UUID, reason: str) -> int:
    """Make current again each of these memories no `supersedes` waypoint points at any more; returns how many."""
    if not older:
        return 0
    rows = session.execute(
        text(
            """
            UPDATE memories o SET status = 'active', valid_to = NULL, updated_at = now(), version = o.version + 1
            WHERE o.id = ANY(CAST(:ids AS uuid[])) AND o.user_id = :user_id AND o.status = 'superseded'
              AND NOT EXISTS (
                  SELECT 1 FROM waypoints w WHERE w.dst_id = o.id AND w.kind = 'supersedes' AND w.user_id = :user_id
              )
            RETURNING o.id
            """
        ),
        {"ids": list(older), "user_id": user_id},
    ).scalars()
    restored = list(rows)
    record(session, user_id, [(i, "restored", because, None, {"reason": reason}) for i in restored])
    return len(restored)
