"""A tenant's memories as the `/memory` and `/users` routes read and link them: one, a page, its history, a client's
reinforcement, typed links. Writes of content go through the engine (`engine.py`); these are the rest."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from shared.errors import NotFound
from shared.storage import memories as memory_store
from shared.storage import vectors as vector_store
from shared.storage import versions as version_store
from shared.storage import waypoints as waypoint_store
from shared.storage.rows import MemoryFilter
from shared.storage.versions import Change


def memory_of(session: Session, tenant: str, memory_id: uuid.UUID) -> dict[str, Any]:
    """The memory; NotFound when the tenant has none of that id."""
    row = memory_store.get_memory(session, tenant, memory_id)
    if row is None:
        raise NotFound(f"memory {memory_id} not found for user_id {tenant!r}")
    return row


def status_of(session: Session, tenant: str, memory_id: uuid.UUID) -> str | None:
    """The memory's status (active, superseded, contradicted); None when the tenant has none of that id."""
    row = memory_store.get_memory(session, tenant, memory_id)
    return row["status"] if row else None


def memories_page(
    session: Session,
    tenant: str,
    *,
    offset: int,
    limit: int,
    sectors: list[str] | None = None,
    tags: list[str] | None = None,
    start_time: datetime | None = None,
    end_time: datetime | None = None,
    occurred_after: datetime | None = None,
    occurred_before: datetime | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """The tenant's memories, newest first, filtered; and how many pass the filters."""
    where = MemoryFilter(
        sectors=sectors,
        tags=tags,
        start_time=start_time,
        end_time=end_time,
        occurred_after=occurred_after,
        occurred_before=occurred_before,
    )
    return memory_store.list_memories(session, tenant, offset=offset, limit=limit, where=where)


def history(session: Session, tenant: str, memory_id: uuid.UUID) -> tuple[dict[str, Any], list[Change]]:
    """The memory and every change recorded to it, oldest first; NotFound when the tenant has none of that id."""
    row = memory_of(session, tenant, memory_id)
    return row, version_store.history(session, tenant, memory_id)


def reinforce(session: Session, tenant: str, memory_id: uuid.UUID, *, boost: float) -> float:
    """A client used the memory: its salience raised by `boost`, seen and used now; its new salience. NotFound when
    the tenant has none of that id."""
    rows = memory_store.reinforce(session, tenant, [memory_id], boost=boost)
    if not rows:
        raise NotFound(f"memory {memory_id} not found")
    return float(rows[0]["salience"])


def link(session: Session, tenant: str, src_id: uuid.UUID, dst_id: uuid.UUID, *, kind: str, weight: float) -> None:
    """A typed waypoint from `src_id` to `dst_id` (a `supersedes` link marks the destination superseded); NotFound
    unless both are the tenant's memories."""
    if not waypoint_store.create_link(session, tenant, src_id, dst_id, kind=kind, weight=weight):
        raise NotFound(f"memories {src_id} and {dst_id} are not both memories of user_id {tenant!r}")


def unlink(session: Session, tenant: str, src_id: uuid.UUID, dst_id: uuid.UUID, *, kind: str) -> bool:
    """Delete the typed waypoint; True when deleting a `supersedes` link made the older memory current again.
    NotFound when there is no such link."""
    was_superseded = kind == "supersedes" and status_of(session, tenant, dst_id) == "superseded"
    if not waypoint_store.delete_link(session, tenant, src_id, dst_id, kind=kind):
        raise NotFound(f"no {kind} link from {src_id} to {dst_id} for user_id {tenant!r}")
    return was_superseded and status_of(session, tenant, dst_id) == "active"


def sector_overview(session: Session, tenant: str) -> tuple[dict[str, dict[str, Any]], int, dict[str, Any]]:
    """The tenant's count and mean salience per sector (sectors it has), its vectors waiting for the index (the
    fresh tier), and its memories by tier and by compression."""
    stats = {row["sector"]: row for row in memory_store.sector_stats(session, tenant)}
    fresh = sum(vector_store.fresh_by_sector(session, tenant).values())
    return stats, fresh, memory_store.lifecycle_stats(session, tenant)
