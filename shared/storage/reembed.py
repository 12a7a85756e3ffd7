"""All SQL of a re-embed: which memories still carry another model's vectors, and swapping their vectors."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.orm import Session

from shared.model.embedders import StoreModel
from shared.storage.rows import SectorVector
from shared.storage.vectors import swap_vectors


@dataclass(frozen=True)
class ReembedRow:
    id: uuid.UUID
    user_id: str
    content: str
    sectors: tuple[str, ...]
    indexed: bool  # False while the memory's vectors wait in the fresh tier for their merge


_TARGETS = (
    "unnest(CAST(:t_sectors AS text[]), CAST(:t_models AS text[]), CAST(:t_dims AS int[])) AS t(sector, model, dim)"
)


def _target_params(targets: Mapping[str, StoreModel]) -> dict[str, list[object]]:
    return {
        "t_sectors": list(targets),
        "t_models": [t.model for t in targets.values()],
        "t_dims": [t.dim for t in targets.values()],
    }


# A vector is stale when another model made it, or the same model at a larger width (an OpenAI-style model asked
# for fewer dimensions). Narrower vectors of the target model are decay's compressed rungs and fingerprints.


def stale_memories(session: Session, targets: Mapping[str, StoreModel]) -> list[tuple[uuid.UUID, str]]:
    """(id, primary sector) of every memory with a vector, in a target sector, not made by that sector's target."""
    rows = session.execute(
        text(
            f"""
            SELECT m.id, m.primary_sector FROM memories m
            WHERE m.id IN (SELECT v.memory_id FROM memory_vectors v JOIN {_TARGETS} ON t.sector = v.sector
                           WHERE v.model <> t.model OR v.dim > t.dim)
            ORDER BY m.primary_sector, m.id
            """
        ),
        _target_params(targets),
    ).all()
    return [(r.id, r.primary_sector) for r in rows]


def count_stale_vectors(session: Session, targets: Mapping[str, StoreModel]) -> int:
    return int(
        session.execute(
            text(
                f"SELECT count(*) FROM memory_vectors v JOIN {_TARGETS} ON t.sector = v.sector "
                "WHERE v.model <> t.model OR v.dim > t.dim"
            ),
            _target_params(targets),
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


def replace_vectors(
    session: Session,
    rows: Sequence[ReembedRow],
    vectors: Sequence[Mapping[str, SectorVector]],
    *,
    sectors: Sequence[str],
) -> None:
    """Swap the memories' vectors of `sectors` for the new ones; fresh ones stay fresh for their merge.
    Compressed or fingerprinted memories come back at full width, like a regeneration."""
    swap_vectors(
        session, [(r.id, r.user_id, v, r.indexed) for r, v in zip(rows, vectors, strict=True)], sectors=sectors
    )
