"""The decay cycle's SQL: the set-based decay step over a slice of a sector, and the compression writes.

The tier and decay formulas are `shared.lifecycle.formulas`'s, written once more in SQL so a batch of tens of
thousands of memories decays in one statement; `tests/integration/lifecycle/test_decay_cycle.py`
checks the two agree row by row.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from pgvector import Vector
from sqlalchemy import text
from sqlalchemy.orm import Session

from shared.lifecycle.compression import FINGERPRINTED
from shared.lifecycle.formulas import MEAN_SECTOR_LAMBDA, MIN_EXPONENT, SALIENCE_FLOOR, TierRules

MIN_UUID = "00000000-0000-0000-0000-000000000000"  # below every id gen_random_uuid() makes
MAX_UUID = "ffffffff-ffff-ffff-ffff-ffffffffffff"


@dataclass(frozen=True)
class DecayParams:
    """What a decay step needs besides the rows: the tier rules, the sector scaling, the thresholds."""

    rules: TierRules
    sector_scaling: bool
    compress_below: float  # decay seed: compress when f < 0.7
    cold_threshold: float  # decay seed: fingerprint when f < OM_DECAY_COLD_THRESHOLD
    full_dim: int  # the dimension of the segment's model
    min_dim: int  # the smallest rung of its ladder


@dataclass
class StepResult:
    """One committed step of a segment: counts for the run, where to continue, what to compress."""

    processed: int = 0
    changed: int = 0
    tiers: dict[str, int] = field(default_factory=lambda: {"hot": 0, "warm": 0, "cold": 0})
    last_id: uuid.UUID | None = None
    to_compress: list[tuple[uuid.UUID, float]] = field(default_factory=list)  # (memory id, decay factor)


def segment_sizes(session: Session) -> dict[str, int]:
    """Memories per primary sector (a segment of the decay cycle)."""
    rows = session.execute(text("SELECT primary_sector, count(*) AS n FROM memories GROUP BY primary_sector")).all()
    return {r.primary_sector: int(r.n) for r in rows}


def id_before(session: Session, sector: str, offset: int) -> str:
    """The id just before position `offset` of the sector in id order (MIN_UUID for 0): a segment that starts
    there walks (that id, MAX_UUID] and then wraps to (MIN_UUID, that id]. Ids are random, so is the place."""
    if offset <= 0:
        return MIN_UUID
    found = session.execute(
        text("SELECT id FROM memories WHERE primary_sector = :s ORDER BY id OFFSET :o LIMIT 1"),
        {"s": sector, "o": offset - 1},
    ).scalar_one_or_none()
    return str(found) if found else MIN_UUID


_STEP_SQL = """
WITH calc AS (
    SELECT m.ctid AS tid, m.id, m.salience, m.tier AS old_tier, m.compression, m.vector_dim, t.tier,
           exp(GREATEST(:min_exponent, -(CASE t.tier WHEN 'hot' THEN :hot_lambda WHEN 'warm' THEN :warm_lambda
                                                          ELSE :cold_lambda END)
               * (CASE WHEN :scaling THEN m.decay_lambda / :mean_lambda ELSE 1.0 END)
               * d.days / (e.eff + 0.1))) AS f
    FROM memories m
    -- decay seed: dt in days since last seen; salience boosted by coactivations: clamp(s x (1 + ln(1 + c)))
    CROSS JOIN LATERAL (SELECT GREATEST(0.0, CAST(extract(epoch FROM (CAST(:now AS timestamptz) - m.last_seen_at))
                                                  AS float8) / 86400.0) AS days) d
    CROSS JOIN LATERAL (SELECT LEAST(1.0, m.salience * (1 + ln(1 + GREATEST(m.coactivations, 0)))) AS eff) e
    -- decay seed tiers: hot = recent AND (coactivations > 5 OR salience > 0.7); warm = recent OR salience > 0.4
    CROSS JOIN LATERAL (SELECT CASE
        WHEN d.days < :recent_days AND (m.coactivations > :hot_coactivations OR e.eff > :hot_salience) THEN 'hot'
        WHEN d.days < :recent_days OR e.eff > :warm_salience THEN 'warm'
        ELSE 'cold' END AS tier) t
    WHERE m.primary_sector = :sector AND m.id > CAST(:after AS uuid) AND m.id <= CAST(:upto AS uuid)
    ORDER BY m.id LIMIT :limit
),
upd AS (
    -- decay seed: new_salience = clamp(salience x f); rows that would not change are not written
    UPDATE memories m SET tier = c.tier,
        salience = CASE WHEN c.salience * c.f < :salience_floor THEN 0.0 ELSE LEAST(1.0, c.salience * c.f) END,
        -- the recall lift is a part of the salience: it decays by the same factor
        recall_lift = CASE WHEN c.salience * c.f < :salience_floor THEN 0.0
                           ELSE LEAST(m.recall_lift * c.f, LEAST(1.0, c.salience * c.f)) END
    FROM calc c
    WHERE m.ctid = c.tid AND (c.tier <> c.old_tier OR c.salience - c.salience * c.f > 1e-7)
    RETURNING m.id
)
SELECT
    (SELECT count(*) FROM calc) AS processed,
    (SELECT count(*) FROM upd) AS changed,
    (SELECT count(*) FROM calc WHERE tier = 'hot') AS hot,
    (SELECT count(*) FROM calc WHERE tier = 'warm') AS warm,
    (SELECT count(*) FROM calc WHERE tier = 'cold') AS cold,
    (SELECT id FROM calc ORDER BY id DESC LIMIT 1) AS last_id,
    (SELECT json_agg(json_build_array(id, f)) FROM calc
     WHERE tier <> 'hot' AND compression <> 'fingerprinted' AND f < :compress_below
       AND (f < :cold_threshold  -- fingerprint, or a smaller rung than the vector is on (rungs are halvings)
            OR (floor(:full_dim * f) < COALESCE(vector_dim, :full_dim) AND COALESCE(vector_dim, :full_dim) > :min_dim)))
        AS to_compress
"""
_PLAN_SETTINGS = (
    "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; "
    "SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off"
)
_PLAN_RESET = "RESET enable_seqscan; RESET enable_bitmapscan; RESET enable_hashjoin; RESET enable_mergejoin"


def decay_step(
    session: Session,
    sector: str,
    *,
    after: str,
    upto: str,
    limit: int,
    now: datetime,
    params: DecayParams,
) -> StepResult:
    """Decay up to `limit` memories of `sector` with ids in (after, upto], in id order, in one statement."""
    r = params.rules
    # A step is a slice of the table reached through an index, updated by tuple id: a nested loop, whatever the
    # slice's share of the table (the planner otherwise hashes the whole table once it is a sizeable share).
    session.execute(text(_PLAN_SETTINGS))
    row = session.execute(
        text(_STEP_SQL),
        {
            "sector": sector,
            "after": after,
            "upto": upto,
            "limit": limit,
            "now": now,
            "hot_lambda": r.hot_lambda,
            "warm_lambda": r.warm_lambda,
            "cold_lambda": r.cold_lambda,
            "scaling": params.sector_scaling,
            "mean_lambda": MEAN_SECTOR_LAMBDA,
            "recent_days": r.recent_days,
            "hot_coactivations": r.hot_coactivations,
            "hot_salience": r.hot_salience,
            "warm_salience": r.warm_salience,
            "compress_below": params.compress_below,
            "cold_threshold": params.cold_threshold,
            "full_dim": params.full_dim,
            "min_dim": params.min_dim,
            "min_exponent": MIN_EXPONENT,
            "salience_floor": SALIENCE_FLOOR,
        },
    ).one()
    session.execute(text(_PLAN_RESET))  # the step's compressions plan as usual
    return StepResult(
        processed=int(row.processed),
        changed=int(row.changed),
        tiers={"hot": int(row.hot), "warm": int(row.warm), "cold": int(row.cold)},
        last_id=row.last_id,
        to_compress=[(uuid.UUID(i), float(f)) for i, f in (row.to_compress or [])],
    )


@dataclass(frozen=True)
class VectorRow:
    memory_id: uuid.UUID
    sector: str
    dim: int
    model: str
    embedding: np.ndarray


@dataclass
class CompressionRow:
    """A memory about to be compressed or fingerprinted, locked, with its vectors."""

    id: uuid.UUID
    content: str
    primary_sector: str
    compression: str
    vectors: list[VectorRow] = field(default_factory=list)  # only when it is to be pooled


def lock_for_compression(
    session: Session, ids: Sequence[uuid.UUID], *, with_vectors: set[uuid.UUID]
) -> dict[uuid.UUID, CompressionRow]:
    """Lock the memories (a concurrent regeneration waits, or is waited for), with their vectors where they are
    to be pooled (`with_vectors`; a fingerprint needs none). Vectors come in binary: parsing their text costs
    more than the pooling."""
    if not ids:
        return {}
    raw = session.connection().connection.driver_connection
    assert raw is not None
    with raw.cursor(binary=True) as cur:
        cur.execute(
            """
            SELECT m.id, m.content, m.primary_sector, m.compression, v.sector, v.dim, v.model,
                   CASE WHEN m.id = ANY(%(pool)s) THEN v.embedding END AS embedding
            FROM memories m LEFT JOIN memory_vectors v ON v.memory_id = m.id
            WHERE m.id = ANY(%(ids)s) AND m.compression <> 'fingerprinted'
            ORDER BY m.id
            FOR UPDATE OF m
            """,
            {"ids": list(ids), "pool": list(with_vectors)},
        )
        rows = cur.fetchall()
    out: dict[uuid.UUID, CompressionRow] = {}
    for memory_id, content, primary_sector, compression, sector, dim, model, embedding in rows:
        memory = out.setdefault(memory_id, CompressionRow(memory_id, content, primary_sector, compression))
        if sector is None:
            continue
        if embedding is not None:
            vector = embedding.to_numpy() if hasattr(embedding, "to_numpy") else embedding
            memory.vectors.append(VectorRow(memory_id, sector, int(dim), model, np.asarray(vector, np.float32)))
    return out


def _stage_vectors(session: Session, vectors: Sequence[VectorRow]) -> None:
    """COPY the pooled vectors (binary) into a transaction-scoped temp table, to update the vector table from."""
    session.execute(
        text(
            "CREATE TEMP TABLE IF NOT EXISTS decay_vectors "
            "(memory_id uuid, sector text, dim smallint, embedding vector) ON COMMIT DELETE ROWS"
        )
    )
    raw = session.connection().connection.driver_connection
    assert raw is not None
    with raw.cursor() as cur, cur.copy("COPY decay_vectors FROM STDIN WITH (FORMAT BINARY)") as copy:
        copy.set_types(["uuid", "text", "int2", "vector"])
        for v in vectors:
            copy.write_row((v.memory_id, v.sector, v.dim, Vector(v.embedding)))


def _literal(vector: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in vector.tolist()) + "]"


@dataclass(frozen=True)
class CompressedMemory:
    """What a memory becomes: its decay summary, state, vector width (compressed) or fingerprint."""

    id: uuid.UUID
    summary: str
    compression: str
    vector_dim: int | None = None
    fingerprint: np.ndarray | None = None


def write_compressed(session: Session, memories: Sequence[CompressedMemory], vectors: Sequence[VectorRow]) -> None:
    """Write a set of compressions at once.

    vectors: the pooled vectors, each replacing the row of its (memory, sector) in place (the row keeps its
    place in or out of the index). Fingerprinted memories lose their vector rows; the fingerprint lives on the
    memory. The summary is not part of the full-text document, so BM25 statistics stand (a memory's terms are
    counted from when it is stored until it is deleted).
    """
    if not memories:
        return
    fingerprinted = [m.id for m in memories if m.compression == FINGERPRINTED]
    if vectors:
        _stage_vectors(session, vectors)
        session.execute(
            text(
                "UPDATE memory_vectors v SET embedding = n.embedding, dim = n.dim FROM decay_vectors n "
                "WHERE v.memory_id = n.memory_id AND v.sector = n.sector"
            )
        )
    if fingerprinted:
        session.execute(
            text("DELETE FROM memory_vectors WHERE memory_id = ANY(CAST(:ids AS uuid[]))"),
            {"ids": [str(i) for i in fingerprinted]},
        )
    session.execute(
        text(
            """
            UPDATE memories m SET summary = n.summary, compression = n.compression, vector_dim = n.dim,
                   fingerprint = CAST(n.fingerprint AS vector)
            FROM unnest(CAST(:ids AS uuid[]), CAST(:summaries AS text[]), CAST(:states AS text[]),
                        CAST(:dims AS int[]), CAST(:fingerprints AS text[]))
                 AS n(id, summary, compression, dim, fingerprint)
            WHERE m.id = n.id
            """
        ),
        {
            "ids": [str(m.id) for m in memories],
            "summaries": [m.summary for m in memories],
            "states": [m.compression for m in memories],
            "dims": [m.vector_dim for m in memories],
            "fingerprints": [None if m.fingerprint is None else _literal(m.fingerprint) for m in memories],
        },
    )
