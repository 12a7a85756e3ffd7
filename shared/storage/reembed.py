"""All SQL of a re-embed: which memories still carry another model's vectors, and swapping their vectors."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sqlalchemy import text
from sqlalchemy.orm import Session

from shared.storage.memories import copy_vectors


@dataclass(frozen=True)
class ReembedRow:
    id: uuid.UUID
    user_id: str
    content: str
    sectors: tuple[str, ...]
    indexed: bool  # False while the memory's vectors wait in the fresh tier for their merge


def stale_memories(session: Session, *, model: str, dim: int) -> list[tuple[uuid.UUID, str]]:
    """(id, primary sector) of every memory with a vector not made by `model` at `dim`, by sector then id."""
    rows = session.execute(
        text(
            """
            SELECT m.id, m.primary_sector FROM memories m
            WHERE m.id IN (SELECT memory_id FROM memory_vectors WHERE model <> :model OR dim <> :dim)
            ORDER BY m.primary_sector, m.id
            """
        ),
        {"model": model, "dim": dim},
    ).all()
    return [(r.id, r.primary_sector) for r in rows]


def count_stale_vectors(session: Session, *, model: str, dim: int) -> int:
    return int(
        session.execute(
            text("SELECT count(*) FROM memory_vectors WHERE model <> :model OR dim <> :dim"),
            {"model": model, "dim": dim},
        ).scalar_one()
    )


def fetch_for_reembed(session: Session, memory_ids: Sequence[uuid.UUID]) -> list[ReembedRow]:
    """The memories still there (deleted ones are skipped), locked against a concurrent PATCH or delete."""
    rows = session.execute(
        text(
            """
            SELECT m.id, m.user_id, m.content, m.sectors,
                   COALESCE((SELECT bool_and(v.indexed) FROM memory_vectors v WHERE v.memory_id = m.id), true)
                       AS indexed
            FROM memories m WHERE m.id = ANY(CAST(:ids AS uuid[]))
            ORDER BY m.id
            FOR UPDATE OF m
            """
        ),
        {"ids": [str(i) for i in memory_ids]},
    ).all()
    return [ReembedRow(r.id, r.user_id, r.content, tuple(r.sectors), bool(r.indexed)) for r in rows]


def replace_vectors(session: Session, rows: Sequence[ReembedRow], vectors: np.ndarray, *, model: str) -> None:
    """Swap each memory's vectors (one per sector) for the new model's; fresh ones stay fresh for their merge."""
    if not rows:
        return
    session.execute(
        text("DELETE FROM memory_vectors WHERE memory_id = ANY(CAST(:ids AS uuid[]))"),
        {"ids": [str(r.id) for r in rows]},
    )
    for indexed in (True, False):
        group = [(r.id, r.user_id, r.sectors, v) for r, v in zip(rows, vectors, strict=True) if r.indexed is indexed]
        if group:
            copy_vectors(session, group, model=model, indexed=indexed)
