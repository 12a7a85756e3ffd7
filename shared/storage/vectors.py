"""SQL over memory vectors: insert from binary arrays, swap and restore at full width, the fresh tier's merge."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from pgvector import Vector
from sqlalchemy import text
from sqlalchemy.orm import Session

from shared.db import write_rows
from shared.storage import anchors
from shared.storage.rows import RETURNED_SET, SectorVector

_VECTOR_COLUMNS = "memory_id, sector, user_id, dim, model, indexed, walked, embedding"
_CODE_COLUMNS = "sector, memory_id, user_id, dim, model, code, anchor"
# The vectors in, from binary arrays (psycopg's `%b`: uuids, vectors and ints as bytes, not text to parse), with the
# fresh codes the writer filed beside them (`anchor`; NULL: the trigger `fresh_codes_added` of migration 0024 files
# it, and writes only the codes the statement did not).
_INSERT = f"""
WITH moved AS (
    SELECT * FROM unnest(%b::uuid[], %b::text[], %b::text[], %b::int2[], %b::text[], %b::bool[], %b::bool[],
                         %b::vector[], %b::int2[])
        AS r({_VECTOR_COLUMNS}, anchor)
),
filed AS (
    INSERT INTO fresh_codes ({_CODE_COLUMNS})
    SELECT sector, memory_id, user_id, dim, model, binary_quantize(embedding)::varbit, anchor FROM moved
    WHERE NOT indexed AND walked AND anchor IS NOT NULL
    ON CONFLICT (sector, memory_id) DO UPDATE SET user_id = excluded.user_id, dim = excluded.dim,
        model = excluded.model, code = excluded.code, anchor = excluded.anchor
)
INSERT INTO memory_vectors ({_VECTOR_COLUMNS}) SELECT {_VECTOR_COLUMNS} FROM moved
"""
VectorRows = Iterable[tuple[uuid.UUID, str, Mapping[str, SectorVector]]]  # memory id, user id, sector -> vector


def copy_vectors(session: Session, rows: VectorRows, *, indexed: bool) -> None:
    """Insert the vectors (one per sector of each memory) in one statement from binary arrays.

    Row-level security refuses COPY FROM into memory_vectors; an INSERT from arrays is checked by the tenant's policy
    and writes each row once (COPY into a temporary table and an INSERT from it cost 6 % more, measured). Fresh
    vectors (`indexed` false) get their codes filed under the nearest anchor here, in one product of matrices per
    model and dimension, instead of by the trigger, which compares each vector with every anchor in SQL (~40 µs a
    vector).

    Of a memory's rows with the same model and vector (simple mode: every sector's) the first is `walked`, the one
    the HNSW graph and the fresh tier's codes hold (migration 0030)."""
    rows = list(rows)
    filed = {} if indexed else _filed(session, rows)
    columns: tuple[list[Any], ...] = tuple([] for _ in range(9))
    for memory_id, user_id, vectors in rows:
        # simple mode: one vector object serves every sector, encoded once; equal vectors in other objects (an
        # import's) are told apart by their bytes
        encoded: dict[int, tuple[Vector, tuple[str, bytes]]] = {}
        walked: set[tuple[str, bytes]] = set()
        for sector, sv in vectors.items():
            if id(sv.vector) not in encoded:
                array = np.asarray(sv.vector, dtype=np.float32)
                encoded[id(sv.vector)] = (Vector(array), (sv.model, array.tobytes()))
            vector, key = encoded[id(sv.vector)]
            first = key not in walked
            walked.add(key)
            dim, anchor = int(sv.vector.shape[0]), filed.get(id(sv.vector))
            for column, value in zip(
                columns, (memory_id, sector, user_id, dim, sv.model, indexed, first, vector, anchor), strict=True
            ):
                column.append(value)
    if not columns[0]:
        return
    write_rows(session, _INSERT, columns)


def _filed(session: Session, rows: Sequence[tuple[uuid.UUID, str, Mapping[str, SectorVector]]]) -> dict[int, int]:
    """The anchor each of the rows' vectors is filed under (by the vector's `id`), where its model and dimension
    have anchors; none before they are trained (the merge files those codes then)."""
    current = anchors.filings(session)
    if not current:
        return {}
    groups: dict[tuple[str, int], dict[int, np.ndarray]] = {}
    for _, _, vectors in rows:
        for sv in vectors.values():
            groups.setdefault((sv.model, int(sv.vector.shape[0])), {})[id(sv.vector)] = sv.vector
    filed: dict[int, int] = {}
    for key, by_id in groups.items():
        filing = current.get(key)
        if filing is not None:
            filed.update(zip(by_id, filing.nearest(np.stack(list(by_id.values()))).tolist(), strict=True))
    return filed


def reset_compression(session: Session, memory_ids: Sequence[uuid.UUID]) -> None:
    """Mark compressed or fingerprinted memories full again (their vectors are being replaced at full width).
    The summary is not part of the full-text document, so BM25 statistics do not move."""
    session.execute(
        text(
            "UPDATE memories SET compression = 'full', vector_dim = NULL, fingerprint = NULL, summary = NULL, "
            "updated_at = now() WHERE id = ANY(CAST(:ids AS uuid[])) AND compression <> 'full'"
        ),
        {"ids": [str(i) for i in memory_ids]},
    )


def swap_vectors(
    session: Session,
    rows: Sequence[tuple[uuid.UUID, str, Mapping[str, SectorVector], bool]],
    *,
    sectors: Sequence[str] | None = None,
) -> None:
    """Replace memories' vectors (of `sectors`, or all of them) with new full-width ones: rows of (memory id,
    user id, sector vectors, indexed). Each memory keeps its place in the index or in the fresh tier (where
    its merge will count its terms); compressed or fingerprinted ones come back full."""
    if not rows:
        return
    ids = [str(memory_id) for memory_id, _, _, _ in rows]
    reset_compression(session, [memory_id for memory_id, _, _, _ in rows])
    session.execute(
        text(
            "DELETE FROM memory_vectors WHERE memory_id = ANY(CAST(:ids AS uuid[])) "
            "AND (CAST(:sectors AS text[]) IS NULL OR sector = ANY(CAST(:sectors AS text[])))"
        ),
        {"ids": ids, "sectors": list(sectors) if sectors is not None else None},
    )
    for indexed in (True, False):
        group = [(i, user, vectors) for i, user, vectors, on in rows if on is indexed and vectors]
        if group:
            copy_vectors(session, group, indexed=indexed)
    if sectors is not None:  # the rows kept and the new ones were elected apart
        elect_walked(session, ids)


def elect_walked(session: Session, memory_ids: Sequence[str]) -> None:
    """Walk one row per (memory, model, vector) of these memories again, the primary sector's first: after some of
    their sectors' vectors were replaced, a vector kept may have lost its walked row, or gained a second one."""
    session.execute(
        text(
            """
            UPDATE memory_vectors v SET walked = w.walked
            FROM (SELECT x.sector, x.memory_id,
                         row_number() OVER (PARTITION BY x.memory_id, x.model, x.embedding
                                            ORDER BY x.sector = m.primary_sector DESC, x.sector) = 1 AS walked
                  FROM memory_vectors x JOIN memories m ON m.id = x.memory_id
                  WHERE x.memory_id = ANY(CAST(:ids AS uuid[]))) w
            WHERE v.sector = w.sector AND v.memory_id = w.memory_id AND v.walked IS DISTINCT FROM w.walked
            """
        ),
        {"ids": list(memory_ids)},
    )


def settled_ids(session: Session, memory_ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
    """Those memories that are settled: their primary-sector vector is in the index, or they are fingerprinted (a
    fingerprint has no vector to wait for). A memory rewritten in place keeps its vectors where they were."""
    if not memory_ids:
        return []
    rows = session.execute(
        text(
            "SELECT m.id FROM memories m WHERE m.id = ANY(CAST(:ids AS uuid[])) AND (m.compression = 'fingerprinted' "
            "OR EXISTS (SELECT 1 FROM memory_vectors v WHERE v.memory_id = m.id AND v.sector = m.primary_sector "
            "AND v.indexed))"
        ),
        {"ids": [str(i) for i in memory_ids]},
    ).all()
    return [r.id for r in rows]


def restore_vectors(
    session: Session, user_id: str, vectors: Mapping[uuid.UUID, Mapping[str, SectorVector]], *, boost: float
) -> None:
    """Decay seed, "Regeneration on Access": full vectors again, summary back to none, tier warm, salience
    + `boost` (a query's doing: recall lift, like a query hit's), seen now. A memory still waiting for its merge
    keeps its vectors in the fresh tier."""
    ids = list(vectors)
    settled = set(settled_ids(session, ids))  # before the swap: a fingerprinted memory counts as settled
    swap_vectors(session, [(i, user_id, vectors[i], i in settled) for i in ids])
    session.execute(
        text(
            f"UPDATE memories SET tier = 'warm', {RETURNED_SET}, last_seen_at = now() "
            "WHERE user_id = :user_id AND id = ANY(CAST(:ids AS uuid[]))"
        ),
        {"user_id": user_id, "ids": [str(i) for i in ids], "boost": boost},
    )


def merge_fresh_vectors(session: Session, *, limit: int) -> tuple[int, dict[str, list[uuid.UUID]]]:
    """Move up to `limit` fresh vectors into the HNSW index (oldest first).

    Returns how many vectors moved, and the memories whose primary-sector vector moved, by sector,
    so they can be linked now.
    """
    rows = session.execute(
        text(
            """
            WITH batch AS (
                SELECT sector, memory_id FROM memory_vectors
                WHERE NOT indexed
                ORDER BY created_at
                LIMIT :limit
                FOR UPDATE SKIP LOCKED
            )
            UPDATE memory_vectors v SET indexed = true
            FROM batch b JOIN memories m ON m.id = b.memory_id
            WHERE v.sector = b.sector AND v.memory_id = b.memory_id
            RETURNING v.sector, v.memory_id, v.sector = m.primary_sector AS is_primary
            """
        ),
        {"limit": limit},
    ).all()
    merged: dict[str, list[uuid.UUID]] = {}
    for r in rows:
        if r.is_primary:
            merged.setdefault(r.sector, []).append(r.memory_id)
    return len(rows), merged


def analyze_vectors(session: Session) -> None:
    """Refresh the planner statistics of the vector table after it grew.

    With stale statistics after a bulk merge the planner believes a tenant has a handful of vectors and
    sorts them by exact distance instead of walking the HNSW index: milliseconds per search, not 0.4 ms.
    """
    session.execute(text("ANALYZE memory_vectors"))


def fresh_by_sector(session: Session, user_id: str | None = None) -> dict[str, int]:
    """Vectors waiting for the merge into the HNSW index, by the sector of their walked row (those with any),
    store-wide or of one tenant: the fresh tier's backlog, which every query of their tenants reads until it drains.
    Counted over their binary codes (`fresh_codes`, one row per distinct fresh vector, kept by triggers): 30-50 ms
    at 108,000 waiting, where counting the vectors' fresh rows read them whole (~200-400 ms with two parallel
    workers); a tenant's through its (user_id, dim) index (6 ms against 13 at 108,000)."""
    if user_id is None:
        rows = session.execute(text("SELECT sector, count(*) AS n FROM fresh_codes GROUP BY sector"))
    else:
        rows = session.execute(
            text("SELECT sector, count(*) AS n FROM fresh_codes WHERE user_id = :user_id GROUP BY sector"),
            {"user_id": user_id},
        )
    return {r.sector: int(r.n) for r in rows}


def fresh_vector_count(session: Session, *, limit: int) -> int:
    """Vectors waiting for the merge, counted up to `limit` (cheap however long the backlog)."""
    return int(
        session.execute(
            text("SELECT count(*) FROM (SELECT 1 FROM memory_vectors WHERE NOT indexed LIMIT :limit) f"),
            {"limit": limit},
        ).scalar_one()
    )
