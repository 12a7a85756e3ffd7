"""What the operator reads of the whole store (`/maintenance/*`): its tiers and the fresh tier's backlog, decay runs,
the embedder's calls, the user ids no request can name (their memories: `memory.records.memories_page`); on a
store-wide session."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.orm import Session

from shared.errors import NotFound
from shared.storage import decay_runs
from shared.storage import embed_logs as embed_log_store
from shared.storage import memories as memory_store
from shared.storage import tenants as tenant_store
from shared.storage import vectors as vector_store


def lifecycle(session: Session, runs: int) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, int]]:
    """The store's memories by tier and compression, its `runs` latest decay runs, its fresh vectors by sector."""
    stats = memory_store.lifecycle_stats(session, None)
    return stats, decay_runs.recent_runs(session, runs), vector_store.fresh_by_sector(session)


def start_decay_run(session: Session, *, ratio: float) -> uuid.UUID:
    """An operator's decay cycle, recorded queued; the caller sends its message after the commit."""
    return decay_runs.create_run(session, trigger="operator", ratio=ratio)


def decay_run(session: Session, run_id: uuid.UUID) -> dict[str, Any]:
    """One decay cycle as recorded; NotFound when there is none of that id."""
    run = decay_runs.get_run(session, run_id)
    if run is None:
        raise NotFound(f"decay run {run_id} not found")
    return run


def embed_calls(
    session: Session, *, limit: int, status: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The embedder's latest calls (newest first, optionally of one status) and per-purpose totals of the last day."""
    return (
        embed_log_store.recent_embed_logs(session, limit=limit, status=status),
        embed_log_store.embed_log_totals(session, hours=24),
    )


def unnamed_user_ids(session: Session) -> dict[str, dict[str, Any]]:
    """Per table, the stored user ids no request can name any more (made before the user_id rule)."""
    return tenant_store.nonconforming_user_ids(session)
