"""Applied events: how a message's effect happens once however often it is delivered (its event id recorded in
the same transaction as the effect; a redelivery finds it there)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.orm import Session


def try_mark_events(session: Session, event_ids: Sequence[str]) -> set[str]:
    """Record events as applied, in one statement; the ones that were not already (the others are redeliveries)."""
    if not event_ids:
        return set()
    rows = session.execute(
        text(
            "INSERT INTO applied_events (event_id) SELECT unnest(CAST(:ids AS text[])) "
            "ON CONFLICT DO NOTHING RETURNING event_id"
        ),
        {"ids": list(event_ids)},
    ).all()
    return {r.event_id for r in rows}


def prune_applied_events(session: Session, *, older_than_days: float) -> int:
    """Forget applied event ids older than any redelivery of their message can be."""
    result = session.execute(
        text("DELETE FROM applied_events WHERE applied_at < now() - make_interval(secs => :secs)"),
        {"secs": older_than_days * 86400},
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
