"""All SQL over memories, their vectors and waypoints. Functions flush; the caller's boundary commits."""

from __future__ import annotations

import itertools
import json
import math
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

import numpy as np
from pgvector import Vector
from sqlalchemy import text
from sqlalchemy.orm import Session

from shared.db import read_rows
from shared.decay import pool_to
from shared.sectors import validate_sector

MEMORY_COLUMNS = (
    "id, user_id, content, summary, primary_sector, sectors, tags, meta, salience, decay_lambda, coactivations, "
    "tier, status, confidence, compression, created_at, updated_at, last_seen_at, occurred_at, document_id"
)
# What scoring and filtering read (the read path's first fetch); the rest is the payload (`fetch_payloads`)
LEAN_COLUMNS = (
    "id, user_id, primary_sector, sectors, tags, salience, decay_lambda, coactivations, "
    "tier, status, confidence, compression, created_at, updated_at, last_seen_at, occurred_at, version"
)


@dataclass(frozen=True)
class SectorVector:
    """One sector's vector of a memory (or of a query), with the model that made it."""

    model: str
    vector: np.ndarray


@dataclass(frozen=True)
class NewMemory:
    """A memory ready to insert: classified, hashed, with a vector per sector."""

    user_id: str
    content: str
    content_hash: str
    primary_sector: str
    sectors: tuple[str, ...]
    tags: tuple[str, ...]
    meta: dict[str, Any]
    salience: float
    decay_lambda: float
    confidence: float
    classification_confidence: float
    vectors: Mapping[str, SectorVector]  # one per sector of `sectors`
    document_id: uuid.UUID | None = None
    chunk_index: int | None = None
    occurred_at: datetime | None = None  # when what it records happened; None: when it is stored


@dataclass(frozen=True)
class StoredRef:
    id: uuid.UUID
    created: bool


def occurred_sql(alias: str) -> str:
    """When memory `alias` happened, in SQL: occurred_at, else when it was stored. Migration 0008 indexes
    exactly this expression (per tenant); a query spelled otherwise cannot use the index."""
    return f"COALESCE({alias}.occurred_at, {alias}.created_at)"


def happened_at(row: Mapping[str, Any]) -> datetime:
    """When a memory row happened: its occurred_at, else when it was stored (what `occurred_sql` reads)."""
    return row["occurred_at"] or row["created_at"]


@dataclass
class MemoryFilter:
    """Row filters shared by listing and retrieval."""

    sectors: Sequence[str] | None = None
    tags: Sequence[str] | None = None
    start_time: datetime | None = None  # when it was stored (OpenMemory's startTime / endTime)
    end_time: datetime | None = None
    occurred_after: datetime | None = None  # when it happened: occurred_at, else when it was stored
    occurred_before: datetime | None = None
    extra_params: dict[str, Any] = field(default_factory=dict)

    def sql(self, alias: str = "m") -> tuple[str, dict[str, Any]]:
        """A SQL fragment (starting with AND, possibly empty) and its parameters."""
        clauses: list[str] = []
        params: dict[str, Any] = {}
        if self.sectors:
            clauses.append(f"{alias}.sectors && CAST(:f_sectors AS text[])")
            params["f_sectors"] = list(self.sectors)
        if self.tags:
            clauses.append(f"{alias}.tags @> CAST(:f_tags AS text[])")
            params["f_tags"] = list(self.tags)
        if self.start_time is not None:
            clauses.append(f"{alias}.created_at >= :f_start")
            params["f_start"] = self.start_time
        if self.end_time is not None:
            clauses.append(f"{alias}.created_at <= :f_end")
            params["f_end"] = self.end_time
        if self.occurred_after is not None:
            clauses.append(f"{occurred_sql(alias)} >= :f_occurred_after")
            params["f_occurred_after"] = self.occurred_after
        if self.occurred_before is not None:
            clauses.append(f"{occurred_sql(alias)} <= :f_occurred_before")
            params["f_occurred_before"] = self.occurred_before
        return "".join(f" AND {c}" for c in clauses), params

    @property
    def active(self) -> bool:
        return bool(
            self.sectors or self.tags or self.start_time or self.end_time or self.occurred_after or self.occurred_before
        )

    def passes(self, row: dict[str, Any]) -> bool:
        """The same filters, on a row already read (a memory reached through a waypoint)."""
        if self.sectors and not set(self.sectors) & set(row["sectors"]):
            return False
        if self.tags and not set(self.tags) <= set(row["tags"]):
            return False
        stored, occurred = row["created_at"], happened_at(row)
        if (self.start_time and stored < self.start_time) or (self.end_time and stored > self.end_time):
            return False
        return not (
            (self.occurred_after and occurred < self.occurred_after)
            or (self.occurred_before and occurred > self.occurred_before)
        )


def row_to_dict(row: Any) -> dict[str, Any]:
    """A memory row (SQLAlchemy's, or a dict from `read_rows`) as the API names its fields."""
    data = dict(getattr(row, "_mapping", row))
    if "meta" in data:
        data["metadata"] = data.pop("meta") or {}
    return data


def insert_memories(session: Session, memories: Sequence[NewMemory], *, indexed: bool) -> list[StoredRef]:
    """Insert memories and their per-sector vectors; an existing (user, content) pair is returned, not duplicated.

    `indexed=False` lands the vectors in the fresh tier (no HNSW cost now; searched exactly until merged).
    Returns one reference per input, in input order.
    """
    if not memories:
        return []
    payload = [
        {
            "user_id": m.user_id,
            "content": m.content,
            "content_hash": m.content_hash,
            "primary_sector": m.primary_sector,
            "sectors": list(m.sectors),
            "tags": list(m.tags),
            "meta": m.meta,
            "salience": m.salience,
            "decay_lambda": m.decay_lambda,
            "confidence": m.confidence,
            "classification_confidence": m.classification_confidence,
            "document_id": str(m.document_id) if m.document_id else None,
            "chunk_index": m.chunk_index,
            "occurred_at": m.occurred_at.isoformat() if m.occurred_at else None,
        }
        for m in memories
    ]
    inserted = session.execute(
        text(
            """
            INSERT INTO memories (user_id, content, content_hash, primary_sector, sectors, tags, meta, salience,
                                  decay_lambda, confidence, classification_confidence, document_id, chunk_index,
                                  occurred_at)
            SELECT r.user_id, r.content, r.content_hash, r.primary_sector, r.sectors, r.tags, r.meta, r.salience,
                   r.decay_lambda, r.confidence, r.classification_confidence, r.document_id, r.chunk_index,
                   r.occurred_at
            FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(
                user_id text, content text, content_hash text, primary_sector text, sectors text[], tags text[],
                meta jsonb, salience real, decay_lambda real, confidence real, classification_confidence real,
                document_id uuid, chunk_index integer, occurred_at timestamptz)
            ON CONFLICT (user_id, content_hash) DO NOTHING
            RETURNING id, user_id, content_hash
            """
        ),
        {"rows": json.dumps(payload)},
    ).all()
    created = {(r.user_id, r.content_hash): r.id for r in inserted}
    missing = {(m.user_id, m.content_hash) for m in memories} - created.keys()
    existing: dict[tuple[str, str], uuid.UUID] = {}
    if missing:
        users, hashes = zip(*missing, strict=True)
        rows = session.execute(
            text(
                "SELECT id, user_id, content_hash FROM memories m "
                "JOIN unnest(CAST(:users AS text[]), CAST(:hashes AS text[])) AS k(u, h) "
                "ON m.user_id = k.u AND m.content_hash = k.h"
            ),
            {"users": list(users), "hashes": list(hashes)},
        ).all()
        existing = {(r.user_id, r.content_hash): r.id for r in rows}

    new_vectors = []
    seen_new: set[uuid.UUID] = set()
    for m in memories:
        memory_id = created.get((m.user_id, m.content_hash))
        if memory_id is not None and memory_id not in seen_new:
            seen_new.add(memory_id)
            new_vectors.append((memory_id, m))
    if new_vectors:
        copy_vectors(session, ((i, m.user_id, m.vectors) for i, m in new_vectors), indexed=indexed)

    refs = []
    for m in memories:
        key = (m.user_id, m.content_hash)
        if key in created:
            refs.append(StoredRef(created[key], True))
        elif key in existing:
            refs.append(StoredRef(existing[key], False))
        else:  # deleted between our insert and select: vanishingly rare, and an error is honest
            raise RuntimeError(f"memory for hash {m.content_hash} vanished during insert")
    # The same content twice in one call: only its first occurrence counts as created.
    first_seen: set[uuid.UUID] = set()
    result = []
    for ref in refs:
        result.append(StoredRef(ref.id, ref.created and ref.id not in first_seen))
        first_seen.add(ref.id)
    return result


VectorRows = Iterable[tuple[uuid.UUID, str, Mapping[str, SectorVector]]]  # memory id, user id, sector -> vector


def copy_vectors(session: Session, rows: VectorRows, *, indexed: bool) -> None:
    """COPY the vectors (one per sector of each memory) in binary: the fastest way into the partitions."""
    raw = session.connection().connection.driver_connection
    assert raw is not None
    with (
        raw.cursor() as cur,
        cur.copy(
            "COPY memory_vectors (memory_id, sector, user_id, dim, model, indexed, embedding) "
            "FROM STDIN WITH (FORMAT BINARY)"
        ) as copy,
    ):
        copy.set_types(["uuid", "text", "text", "int2", "text", "bool", "vector"])
        for memory_id, user_id, vectors in rows:
            encoded: dict[int, Vector] = {}  # simple mode: one vector serves every sector
            for sector, sv in vectors.items():
                vector = encoded.setdefault(id(sv.vector), Vector(np.asarray(sv.vector, dtype=np.float32)))
                copy.write_row((memory_id, sector, user_id, int(sv.vector.shape[0]), sv.model, indexed, vector))


def link_to_best_match(
    session: Session, memory_ids: Sequence[uuid.UUID], sector: str, *, dim: int, model: str, threshold: float
) -> int:
    """Create each new memory's single waypoint to its most similar memory (cosine ≥ threshold).

    Searched among indexed memories of the memory's primary-sector partition (architecture seed: the
    single strongest link); a link that crosses sectors is made in both directions.
    """
    if not memory_ids:
        return 0
    result = session.execute(
        text(
            f"""
            WITH links AS (
                SELECT n.memory_id AS src_id, best.memory_id AS dst_id, n.user_id, best.sim
                FROM memory_vectors n
                CROSS JOIN LATERAL (
                    SELECT v.memory_id,
                           1 - (v.embedding::vector({dim}) <=> n.embedding::vector({dim})) AS sim
                    FROM memory_vectors v
                    WHERE v.sector = :sector AND v.dim = {dim} AND v.indexed AND v.user_id = n.user_id
                      AND v.model = :model AND v.memory_id <> n.memory_id
                    ORDER BY v.embedding::vector({dim}) <=> n.embedding::vector({dim})
                    LIMIT 1
                ) best
                WHERE n.sector = :sector AND n.dim = {dim} AND n.model = :model
                  AND n.memory_id = ANY(CAST(:ids AS uuid[]))
                  AND best.sim >= :threshold
            ),
            forward AS (
                INSERT INTO waypoints (src_id, dst_id, user_id, weight)
                SELECT src_id, dst_id, user_id, LEAST(sim, 1.0) FROM links
                ON CONFLICT DO NOTHING
                RETURNING 1
            ),
            backward AS (
                INSERT INTO waypoints (src_id, dst_id, user_id, weight)
                SELECT l.dst_id, l.src_id, l.user_id, LEAST(l.sim, 1.0)
                FROM links l JOIN memories d ON d.id = l.dst_id
                WHERE d.primary_sector <> :sector
                ON CONFLICT DO NOTHING
                RETURNING 1
            )
            SELECT (SELECT count(*) FROM forward) + (SELECT count(*) FROM backward)
            """
        ),
        {"ids": [str(i) for i in memory_ids], "sector": sector, "threshold": threshold, "model": model},
    ).scalar_one()
    return int(result)


def get_memory(session: Session, user_id: str, memory_id: uuid.UUID) -> dict[str, Any] | None:
    row = session.execute(
        text(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = :id AND user_id = :user_id"),
        {"id": memory_id, "user_id": user_id},
    ).first()
    return row_to_dict(row) if row else None


def list_memories(
    session: Session, user_id: str, *, offset: int, limit: int, where: MemoryFilter
) -> tuple[list[dict[str, Any]], int]:
    """A page of a tenant's memories, newest first, and the total that match."""
    clause, params = where.sql("m")
    params |= {"user_id": user_id, "offset": offset, "limit": limit}
    rows = session.execute(
        text(
            f"SELECT {MEMORY_COLUMNS} FROM memories m WHERE m.user_id = :user_id{clause} "
            "ORDER BY m.created_at DESC, m.id DESC OFFSET :offset LIMIT :limit"
        ),
        params,
    ).all()
    total = session.execute(
        text(f"SELECT count(*) FROM memories m WHERE m.user_id = :user_id{clause}"), params
    ).scalar_one()
    return [row_to_dict(r) for r in rows], int(total)


def delete_memory(session: Session, user_id: str, memory_id: uuid.UUID) -> bool:
    """Delete a memory; its vectors and waypoints go with it (ON DELETE CASCADE)."""
    result = session.execute(
        text("DELETE FROM memories WHERE id = :id AND user_id = :user_id RETURNING id"),
        {"id": memory_id, "user_id": user_id},
    ).first()
    return result is not None


def update_memory_fields(
    session: Session,
    user_id: str,
    memory_id: uuid.UUID,
    *,
    tags: Sequence[str] | None,
    meta: dict[str, Any] | None,
    status: str | None = None,
    occurred_at: datetime | None = None,
) -> None:
    session.execute(
        text(
            "UPDATE memories SET tags = COALESCE(CAST(:tags AS text[]), tags), "
            "meta = COALESCE(CAST(:meta AS jsonb), meta), status = COALESCE(CAST(:status AS text), status), "
            "occurred_at = COALESCE(CAST(:occurred_at AS timestamptz), occurred_at), "
            "updated_at = now(), version = version + 1 "
            "WHERE id = :id AND user_id = :user_id"
        ),
        {
            "id": memory_id,
            "user_id": user_id,
            "tags": list(tags) if tags is not None else None,
            "meta": json.dumps(meta) if meta is not None else None,
            "status": status,
            "occurred_at": occurred_at,
        },
    )


def link_in_order(session: Session, user_id: str, memory_ids: Sequence[uuid.UUID]) -> int:
    """A `next` waypoint (weight 1.0) from each memory to the one after it, skipping a memory repeated in a
    row and any that is gone or not the tenant's (idempotent); the links made."""
    pairs = [(a, b) for a, b in itertools.pairwise(memory_ids) if a != b]
    if not pairs:
        return 0
    result = session.execute(
        text(
            """
            INSERT INTO waypoints (src_id, dst_id, user_id, kind, weight)
            SELECT p.src, p.dst, :user_id, 'next', 1.0
            FROM unnest(CAST(:src AS uuid[]), CAST(:dst AS uuid[])) AS p(src, dst)
            JOIN memories a ON a.id = p.src AND a.user_id = :user_id
            JOIN memories b ON b.id = p.dst AND b.user_id = :user_id
            ON CONFLICT (src_id, dst_id, kind) DO NOTHING
            """
        ),
        {"user_id": user_id, "src": [str(a) for a, _ in pairs], "dst": [str(b) for _, b in pairs]},
    )
    return int(getattr(result, "rowcount", 0) or 0)


def preceding_contents(
    session: Session, user_id: str, memory_ids: Sequence[uuid.UUID], *, turns: int, inclusive: bool = False
) -> dict[uuid.UUID, list[str]]:
    """The contents of up to `turns` memories before each memory along `next` waypoints, oldest first (the
    memory's own content last when `inclusive`, counted among the turns). Where several memories lead to
    one, the latest link is followed. Memories with nothing before them are left out."""
    if turns <= 0 or not memory_ids:
        return {}
    rows = session.execute(
        text(
            """
            WITH RECURSIVE back (origin, id, depth) AS (
                SELECT o.id, o.id, 0 FROM unnest(CAST(:ids AS uuid[])) AS o (id)
                UNION ALL
                SELECT b.origin, p.src_id, b.depth + 1
                FROM back b
                CROSS JOIN LATERAL (
                    SELECT w.src_id FROM waypoints w
                    WHERE w.dst_id = b.id AND w.kind = 'next' AND w.user_id = :user_id
                    ORDER BY w.created_at DESC, w.src_id
                    LIMIT 1
                ) p
                WHERE b.depth < :last
            )
            SELECT b.origin, m.content
            FROM back b JOIN memories m ON m.id = b.id AND m.user_id = :user_id
            WHERE b.depth >= :first
            ORDER BY b.origin, b.depth DESC
            """
        ),
        {
            "ids": [str(i) for i in memory_ids],
            "user_id": user_id,
            "first": 0 if inclusive else 1,
            "last": turns - 1 if inclusive else turns,
        },
    ).all()
    out: dict[uuid.UUID, list[str]] = defaultdict(list)
    for origin, content in rows:
        out[origin].append(content)
    return dict(out)


@dataclass(frozen=True)
class Follower:
    id: uuid.UUID
    content: str
    sectors: tuple[str, ...]


def full_width_followers(session: Session, user_id: str, memory_id: uuid.UUID, *, turns: int) -> list[Follower]:
    """The memories up to `turns` `next` links after `memory_id` (every branch) whose vectors are full width,
    locked for a re-embed; compressed and fingerprinted ones are left to their regeneration."""
    if turns <= 0:
        return []
    rows = session.execute(
        text(
            """
            WITH RECURSIVE ahead (id, depth) AS (
                SELECT CAST(:id AS uuid), 0
                UNION
                SELECT w.dst_id, a.depth + 1
                FROM ahead a JOIN waypoints w ON w.src_id = a.id AND w.kind = 'next' AND w.user_id = :user_id
                WHERE a.depth < :turns
            )
            SELECT m.id, m.content, m.sectors FROM memories m
            WHERE m.id IN (SELECT id FROM ahead WHERE id <> CAST(:id AS uuid)) AND m.user_id = :user_id
              AND m.compression = 'full'
            ORDER BY m.id
            FOR UPDATE
            """
        ),
        {"id": memory_id, "user_id": user_id, "turns": turns},
    ).all()
    return [Follower(r.id, r.content, tuple(r.sectors)) for r in rows]


def create_link(session: Session, user_id: str, src: uuid.UUID, dst: uuid.UUID, *, kind: str, weight: float) -> bool:
    """A typed waypoint between two of the tenant's memories (weight updated if it exists); False if either
    memory is not the tenant's. `supersedes` also marks the older memory superseded."""
    row = session.execute(
        text(
            """
            INSERT INTO waypoints (src_id, dst_id, user_id, kind, weight)
            SELECT :src, :dst, :user_id, :kind, :weight
            WHERE (SELECT count(*) FROM memories WHERE id IN (:src, :dst) AND user_id = :user_id) = 2
            ON CONFLICT (src_id, dst_id, kind) DO UPDATE SET weight = EXCLUDED.weight
            RETURNING src_id
            """
        ),
        {"src": src, "dst": dst, "user_id": user_id, "kind": kind, "weight": weight},
    ).first()
    if row is not None and kind == "supersedes":
        update_memory_fields(session, user_id, dst, tags=None, meta=None, status="superseded")
    return row is not None


def replace_content(session: Session, user_id: str, memory_id: uuid.UUID, new: NewMemory) -> None:
    """Swap a memory's content, classification and vectors in place (PATCH with new content)."""
    session.execute(
        text(
            "UPDATE memories SET content = :content, content_hash = :content_hash, summary = NULL, "
            "primary_sector = :primary_sector, sectors = CAST(:sectors AS text[]), decay_lambda = :decay_lambda, "
            "classification_confidence = :cc, compression = 'full', vector_dim = NULL, fingerprint = NULL, "
            "updated_at = now(), "
            "version = version + 1 "
            "WHERE id = :id AND user_id = :user_id"
        ),
        {
            "id": memory_id,
            "user_id": user_id,
            "content": new.content,
            "content_hash": new.content_hash,
            "primary_sector": new.primary_sector,
            "sectors": list(new.sectors),
            "decay_lambda": new.decay_lambda,
            "cc": new.classification_confidence,
        },
    )
    session.execute(text("DELETE FROM memory_vectors WHERE memory_id = :id"), {"id": memory_id})
    copy_vectors(session, [(memory_id, user_id, new.vectors)], indexed=True)


@dataclass(frozen=True)
class DecayedMemory:
    id: uuid.UUID
    content: str
    sectors: tuple[str, ...]
    primary_sector: str


def lock_decayed(session: Session, user_id: str, memory_ids: Sequence[uuid.UUID]) -> list[DecayedMemory]:
    """The compressed or fingerprinted ones among `memory_ids`, locked for their regeneration."""
    rows = session.execute(
        text(
            "SELECT id, content, sectors, primary_sector FROM memories WHERE user_id = :user_id "
            "AND id = ANY(CAST(:ids AS uuid[])) AND compression <> 'full' ORDER BY id FOR UPDATE"
        ),
        {"user_id": user_id, "ids": [str(i) for i in memory_ids]},
    ).all()
    return [DecayedMemory(r.id, r.content, tuple(r.sectors), r.primary_sector) for r in rows]


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


def restore_vectors(
    session: Session, user_id: str, vectors: Mapping[uuid.UUID, Mapping[str, SectorVector]], *, boost: float
) -> None:
    """Decay seed, "Regeneration on Access": full vectors again, summary back to none, tier warm, salience
    + `boost`, seen now. A memory still waiting for its merge keeps its vectors in the fresh tier."""
    ids = list(vectors)
    counted = set(settled_ids(session, ids))  # before the swap: a fingerprinted memory counts as settled
    swap_vectors(session, [(i, user_id, vectors[i], i in counted) for i in ids])
    session.execute(
        text(
            "UPDATE memories SET tier = 'warm', salience = LEAST(1.0, salience + :boost), last_seen_at = now() "
            "WHERE user_id = :user_id AND id = ANY(CAST(:ids AS uuid[]))"
        ),
        {"user_id": user_id, "ids": [str(i) for i in ids], "boost": boost},
    )


def content_hash_owner(session: Session, user_id: str, content_hash: str) -> uuid.UUID | None:
    return session.execute(
        text("SELECT id FROM memories WHERE user_id = :u AND content_hash = :h"),
        {"u": user_id, "h": content_hash},
    ).scalar_one_or_none()


def reinforce(
    session: Session, user_id: str, memory_ids: Sequence[uuid.UUID], *, boost: float, count_coactivation: bool
) -> list[dict[str, Any]]:
    """Raise salience by `boost` (capped at 1), refresh last_seen_at; returns the updated rows."""
    rows = session.execute(
        text(
            f"""
            UPDATE memories SET salience = LEAST(1.0, salience + :boost), last_seen_at = now(), updated_at = now(),
                   coactivations = coactivations + CASE WHEN :count THEN 1 ELSE 0 END
            WHERE user_id = :user_id AND id = ANY(CAST(:ids AS uuid[]))
            RETURNING {MEMORY_COLUMNS}
            """
        ),
        {
            "ids": [str(i) for i in memory_ids],
            "user_id": user_id,
            "boost": boost,
            "count": count_coactivation,
        },
    ).all()
    return [row_to_dict(r) for r in rows]


def strengthen_waypoints(
    session: Session, user_id: str, pairs: Sequence[tuple[uuid.UUID, uuid.UUID]], *, step: float, cap: float
) -> int:
    """Add `step` to each traversed waypoint's weight, capped (architecture seed: +0.05, max 1.0)."""
    if not pairs:
        return 0
    src, dst = zip(*pairs, strict=True)
    result = session.execute(
        text(
            """
            UPDATE waypoints w SET weight = LEAST(:cap, w.weight + :step), updated_at = now()
            FROM unnest(CAST(:src AS uuid[]), CAST(:dst AS uuid[])) AS p(src_id, dst_id)
            WHERE w.src_id = p.src_id AND w.dst_id = p.dst_id AND w.user_id = :user_id AND w.kind = 'association'
            """
        ),
        {
            "src": [str(s) for s in src],
            "dst": [str(d) for d in dst],
            "user_id": user_id,
            "step": step,
            "cap": cap,
        },
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def prune_waypoints(session: Session, *, below: float) -> int:
    """Remove association links weaker than `below` (architecture seed: every 7 days, < 0.05)."""
    result = session.execute(
        text("DELETE FROM waypoints WHERE kind = 'association' AND weight < :below"), {"below": below}
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def sector_stats(session: Session, user_id: str | None) -> list[dict[str, Any]]:
    rows = session.execute(
        text(
            "SELECT primary_sector AS sector, count(*) AS count, avg(salience) AS avg_salience FROM memories "
            "WHERE (CAST(:user_id AS text) IS NULL OR user_id = :user_id) GROUP BY primary_sector"
        ),
        {"user_id": user_id},
    ).all()
    return [dict(r._mapping) for r in rows]


def count_terms(session: Session, memory_ids: Sequence[uuid.UUID], *, sign: int) -> None:
    """Add (+1) or remove (-1) memories from their tenant's BM25 statistics: document frequency per
    lexeme, document count and total length. Call exactly once per memory settling or leaving."""
    if not memory_ids:
        return
    params = {"ids": [str(i) for i in memory_ids], "sign": sign}
    session.execute(
        text(
            """
            INSERT INTO term_stats (user_id, lexeme, df)
            SELECT m.user_id, t.lexeme, count(*) * :sign
            FROM memories m, unnest(m.search) AS t
            WHERE m.id = ANY(CAST(:ids AS uuid[]))
            GROUP BY m.user_id, t.lexeme
            ORDER BY m.user_id, t.lexeme
            ON CONFLICT (user_id, lexeme) DO UPDATE SET df = term_stats.df + excluded.df
            """
        ),
        params,
    )
    session.execute(
        text(
            """
            INSERT INTO tenant_stats (user_id, documents, total_length)
            SELECT user_id, count(*) * :sign, sum(length(search)) * :sign
            FROM memories WHERE id = ANY(CAST(:ids AS uuid[]))
            GROUP BY user_id
            ON CONFLICT (user_id) DO UPDATE SET documents = tenant_stats.documents + excluded.documents,
                total_length = tenant_stats.total_length + excluded.total_length
            """
        ),
        params,
    )


def settled_ids(session: Session, memory_ids: Sequence[uuid.UUID]) -> list[uuid.UUID]:
    """Those memories whose BM25 terms are counted: their primary-sector vector is in the index, or they are
    fingerprinted (a fingerprint has no vector to wait for)."""
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


@dataclass(frozen=True)
class LexicalParams:
    config: str
    k1: float
    b: float
    common_ratio: float
    common_min_df: int
    term_frequency: bool = True
    select_budget: int = 0  # 0: no limit
    rescore_window: int = 0  # 0: every match scored with term frequency


def select_terms(terms: Sequence[str], df: Mapping[str, int], *, budget: int) -> list[str]:
    """The terms that select candidates: the rarest first, while their document frequencies add up to at
    most `budget` (the rarest always; 0 = no limit). The rest still score every candidate: this bounds
    the rows a query scores in a large store, and a memory that only shares the dropped, more common
    terms with the query would have ranked low anyway."""
    if not budget:
        return list(terms)
    chosen: list[str] = []
    total = 0
    for term in sorted(terms, key=lambda t: (df.get(t, 0), t)):
        if chosen and total + df.get(term, 0) > budget:
            break
        chosen.append(term)
        total += df.get(term, 0)
    return chosen


def _tsquery_literal(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def lexical_candidates(
    session: Session, user_id: str, query: str, *, limit: int, where: MemoryFilter, params: LexicalParams
) -> list[tuple[uuid.UUID, float]]:
    """Full-text candidates scored like BM25 with the tenant's document frequencies, best first.

    Lucene's IDF, ln(1 + (N - df + 0.5) / (df + 0.5)), stays positive on tiny stores (no small-corpus
    collapse); a term's frequency in the memory saturates by k1, normalised by the memory's length (its
    distinct lexemes against the tenant's average).
    Only rare terms select candidates (Elasticsearch's common-terms cutoff), so a query with a word in
    half the store does not rank half the store; every query term still adds to the score.
    """
    rows = read_rows(
        session,
        """
            SELECT q.lexeme, COALESCE(ts.df, 0) AS df, tn.documents, tn.total_length
            FROM (SELECT DISTINCT lexeme FROM unnest(to_tsvector(CAST(:config AS regconfig), :query))) AS q
            LEFT JOIN term_stats ts ON ts.user_id = :user_id AND ts.lexeme = q.lexeme
            LEFT JOIN tenant_stats tn ON tn.user_id = :user_id
            ORDER BY q.lexeme
            """,
        {"config": params.config, "query": query, "user_id": user_id},
    )
    if not rows:
        return []
    lexemes = [r.lexeme for r in rows]
    df = {r.lexeme: max(int(r.df), 0) for r in rows}
    documents = max(int(rows[0].documents or 0), 0)
    avg_length = int(rows[0].total_length or 0) / documents if documents else 1.0
    n = max(documents, 1)
    idf = {t: math.log(1 + (n - min(df.get(t, 0), n) + 0.5) / (df.get(t, 0) + 0.5)) for t in lexemes}
    common_df = max(params.common_ratio * documents, params.common_min_df)
    rare = select_terms([t for t in lexemes if df.get(t, 0) <= common_df], df, budget=params.select_budget)
    read_cap = 0
    if rare:
        selector = " | ".join(_tsquery_literal(t) for t in rare)
        may_match = sum(df.get(t, 0) for t in rare)  # at most
    else:  # every term is common: the memories with all of them are the candidates
        # A term in most memories narrows nothing but costs its whole posting list. Ranking by common words is
        # worth it only while the memories with all of them are few enough to score each one with term
        # frequency (the rescore window; the budget when there is none): expected to be more, if the words
        # occurred independently, they are too common to rank by and the query gets no full-text candidates
        # (the dense ones remain). Words that go together (a phrase: "invoice backlog") match far more often
        # than that estimate — at 1M, two terms in 5.5 % of memories each were expected in 3,000 and were in
        # all 55,000 of the one's (0.38 s) — so only the first `cap` matches the index gives are read.
        cap = params.rescore_window or params.select_budget
        narrowing = [t for t in lexemes if df.get(t, 0) <= n / 2] or lexemes
        expected = n * math.prod(min(df.get(t, 0), n) / n for t in narrowing)
        if cap and expected > cap:
            return []
        selector = " & ".join(_tsquery_literal(t) for t in narrowing)
        may_match = min(df.get(t, 0) for t in narrowing)
        read_cap = cap if cap and may_match > cap else 0

    clause, filter_params = where.sql("m")
    norm = "(:k1 * (1 - :b + :b * length(m.search) / CAST(:avg_length AS double precision)))"
    # A matched term counted once: cheap (a lookup per term), and the score itself for memories that say
    # each query word once.
    terms = " + ".join(
        f"CASE WHEN m.search @@ CAST(:t{i} AS tsquery) THEN :idf{i} ELSE 0 END" for i in range(len(lexemes))
    )
    once_sql = f"({terms}) * (:k1 + 1) / (1 + {norm})"
    bind: dict[str, Any] = {f"t{i}": _tsquery_literal(t) for i, t in enumerate(lexemes)}
    bind |= {f"idf{i}": idf[t] for i, t in enumerate(lexemes)}
    matching = f"""SELECT m.id, m.search FROM memories m
            WHERE m.user_id = :user_id AND m.search @@ CAST(:selector AS tsquery){clause}"""
    if read_cap:
        matching = f"SELECT * FROM ({matching} LIMIT :read_cap) AS m"
        bind["read_cap"] = read_cap
        may_match = read_cap
    if params.term_frequency:
        # tf = the lexeme's positions in the memory (content, summary and tags), saturated by k1
        score_sql = f"""(SELECT COALESCE(sum(q.idf * t.tf * (:k1 + 1) / (t.tf + {norm})), 0)
                 FROM (SELECT u.lexeme, COALESCE(cardinality(u.positions), 1) AS tf FROM unnest(m.search) u) t
                 JOIN unnest(CAST(:lexemes AS text[]), CAST(:idfs AS double precision[])) AS q(lexeme, idf)
                 ON q.lexeme = t.lexeme)"""
        bind |= {"lexemes": lexemes, "idfs": [idf[t] for t in lexemes]}
        # Term frequency costs a walk through each memory's lexemes (~5 us a row here): when more memories
        # than the window may match, the window's best by the count-once score are the ones scored with it.
        if params.rescore_window and may_match > params.rescore_window:
            matching = f"""SELECT * FROM ({matching} ORDER BY {once_sql} DESC, m.id LIMIT :window) AS m"""
            bind["window"] = params.rescore_window
    else:
        score_sql = once_sql
    rows = read_rows(
        session,
        f"""
            SELECT m.id, {score_sql} AS score
            FROM ({matching}) AS m
            ORDER BY score DESC, m.id
            LIMIT :limit
            """,
        bind
        | filter_params
        | {
            "user_id": user_id,
            "selector": selector,
            "limit": limit,
            "k1": params.k1,
            "b": params.b,
            "avg_length": max(avg_length, 1.0),
        },
    )
    return [(r.id, float(r.score)) for r in rows]


T = TypeVar("T")


def group_sectors(per_sector: Mapping[str, T]) -> list[tuple[T, list[str]]]:
    """Sectors grouped by the object they share (a provider, a query vector): one group in simple mode."""
    groups: dict[int, tuple[T, list[str]]] = {}
    for sector, value in per_sector.items():
        groups.setdefault(id(value), (value, []))[1].append(sector)
    return list(groups.values())


def query_rungs(vector: np.ndarray, ladder: Callable[[int], Sequence[int]]) -> dict[int, np.ndarray]:
    """The query at each rung its model's vectors may be compressed to (pooled the way memories are)."""
    full = np.asarray(vector, dtype=np.float32)
    return {dim: full if dim == full.shape[0] else pool_to(full, dim) for dim in ladder(int(full.shape[0]))}


def compressed_rungs(
    session: Session, user_id: str, sectors: Sequence[str], dims: Sequence[int]
) -> set[tuple[str, int]]:
    """The (sector, dim) pairs among `dims` on which the tenant has vectors: one probe of a partition's
    (user_id, dim) index per pair, in one round trip, so a query searches a compressed rung's index only where
    it can find something. Sector and dim are literals on purpose: with parameters the planner cannot see that
    a rung is rare and scans.

    A separate round trip on purpose, too: written into the search itself as one-time filters, the rungs'
    branches cost more to plan on every query (~2.4 ms of the dense stage's ~5.5 at 100k) than this probe."""
    if not dims:
        return set()
    probes = [
        f"SELECT '{sector}' AS sector, {int(dim)} AS dim WHERE EXISTS "
        f"(SELECT 1 FROM memory_vectors_{sector} WHERE user_id = :user_id AND dim = {int(dim)})"
        for sector in map(validate_sector, sectors)
        for dim in dims
    ]
    rows = read_rows(session, " UNION ALL ".join(probes), {"user_id": user_id})
    return {(r.sector, int(r.dim)) for r in rows}


def dense_candidates(
    session: Session,
    user_id: str,
    queries: Mapping[str, SectorVector],
    *,
    limit: int,
    where: MemoryFilter,
    ladder: Callable[[int], Sequence[int]] = lambda dim: (dim,),
) -> list[tuple[uuid.UUID, float]]:
    """Nearest memories by cosine over each sector's HNSW index, best similarity per memory, best first.

    `ladder`: the dimensions a model's vectors may have been compressed to (decay); each rung the tenant has
    vectors on is searched with the query pooled to it, through that rung's own partial HNSW index.

    `queries`: the sectors to search, each with the query embedded by that sector's model; only vectors
    of that model count (during a re-embed a store holds two models' vectors).
    """
    if not queries:
        return []
    clause, params = where.sql("m")
    filter_sql = f" AND EXISTS (SELECT 1 FROM memories m WHERE m.id = v.memory_id{clause})" if clause else ""
    groups = group_sectors(queries)
    smaller = {d for query, _ in groups for d in ladder(int(query.vector.shape[0]))[1:]}
    present = compressed_rungs(session, user_id, list(queries), sorted(smaller)) if smaller else set()
    parts = []
    for g, (query, sectors) in enumerate(groups):
        params[f"model{g}"] = query.model
        for dim, vector in query_rungs(query.vector, ladder).items():
            full = dim == int(query.vector.shape[0])
            on_rung = sectors if full else [sector for sector in sectors if (sector, dim) in present]
            if not on_rung:
                continue
            name = f"q{g}_{dim}"
            distance = f"v.embedding::vector({dim}) <=> CAST(:{name} AS vector({dim}))"
            params[name] = Vector(vector)
            # Settled rows through each partition's HNSW index (one ordered index scan per sector) ...
            for sector in on_rung:
                params[f"s_{sector}"] = sector
                parts.append(
                    f"""(SELECT v.memory_id, 1 - ({distance}) AS sim
                         FROM memory_vectors v
                         WHERE v.sector = :s_{sector} AND v.dim = {dim} AND v.indexed AND v.user_id = :user_id
                           AND v.model = :model{g}{filter_sql}
                         ORDER BY {distance}
                         LIMIT :limit)"""
                )
            # ... and the tenant's fresh rows, in all those sectors at once, by exact scan of the fresh index.
            params[f"fresh{g}_{dim}"] = on_rung
            parts.append(
                f"""(SELECT v.memory_id, 1 - ({distance}) AS sim
                     FROM memory_vectors v
                     WHERE v.sector = ANY(CAST(:fresh{g}_{dim} AS text[])) AND v.dim = {dim} AND NOT v.indexed
                       AND v.user_id = :user_id AND v.model = :model{g}{filter_sql}
                     ORDER BY {distance}
                     LIMIT :limit)"""
            )
    rows = read_rows(session, " UNION ALL ".join(parts), params | {"user_id": user_id, "limit": limit})
    best: dict[uuid.UUID, float] = {}
    for r in rows:
        best[r.memory_id] = max(best.get(r.memory_id, -1.0), float(r.sim))
    return sorted(best.items(), key=lambda kv: (-kv[1], str(kv[0])))


class FetchedLinks(NamedTuple):
    """What `fetch_with_links` read: lean rows by id, and the links among them by kind."""

    rows: dict[uuid.UUID, dict[str, Any]]
    links: list[tuple[uuid.UUID, uuid.UUID, float]]  # association and `next`: activation spreads along both
    order: list[tuple[uuid.UUID, uuid.UUID, float]]  # `next` alone: the reading order context support follows
    contradicts: list[tuple[uuid.UUID, uuid.UUID]]


def fetch_with_links(
    session: Session,
    user_id: str,
    seed_ids: Sequence[uuid.UUID],
    queries: Mapping[str, SectorVector],
    *,
    known_cosine: Sequence[uuid.UUID] = (),
    max_hops: int = 1,
    ladder: Callable[[int], Sequence[int]] = lambda dim: (dim,),
) -> FetchedLinks:
    """One round trip for what scoring needs: the seeds, the memories up to `max_hops` (1 or 2) association or
    reading-order (`next`) waypoints away (either direction), each with `cosine` (the query's similarity to its
    primary-sector vector; None for `known_cosine` ids, which the dense search already measured), the links
    that spread activation, those of them that are reading order, and the `contradicts` edges from those
    memories.

    Rows are lean: without their payload (content, summary, metadata, document) but with `version`; the
    caller scores many and reads the payload of the few it returns (`fetch_payloads`, or the hot-row cache)."""
    if not seed_ids:
        return FetchedLinks({}, [], [], [])
    params: dict[str, Any] = {}
    cosine = f"CASE WHEN m.id = ANY(CAST(:known AS uuid[])) THEN NULL {_cosine_branches(queries, ladder, params)} END"
    rows = read_rows(
        session,
        f"""
            WITH direct AS (
                SELECT src_id, dst_id, weight, kind FROM waypoints
                WHERE kind IN ('association', 'next', 'contradicts') AND user_id = :user_id
                  AND (src_id = ANY(CAST(:ids AS uuid[])) OR dst_id = ANY(CAST(:ids AS uuid[])))
            ),
            hop1 AS (
                SELECT src_id AS id FROM direct WHERE kind <> 'contradicts'
                UNION SELECT dst_id FROM direct WHERE kind <> 'contradicts'
            ),
            further AS (  -- the links of the memories one hop away, when activation spreads further
                -- (index lookups by an id array, each direction on its own: a join or an OR of the two
                -- directions lets the planner scan the whole table)
                SELECT src_id, dst_id, weight, kind FROM waypoints
                WHERE :max_hops >= 2 AND kind IN ('association', 'next') AND user_id = :user_id
                  AND src_id = ANY(ARRAY(SELECT id FROM hop1))
                UNION
                SELECT src_id, dst_id, weight, kind FROM waypoints
                WHERE :max_hops >= 2 AND kind IN ('association', 'next') AND user_id = :user_id
                  AND dst_id = ANY(ARRAY(SELECT id FROM hop1))
            ),
            links AS (SELECT * FROM direct UNION SELECT * FROM further),
            wanted AS (
                SELECT unnest(CAST(:ids AS uuid[])) AS id
                UNION SELECT src_id FROM links WHERE kind <> 'contradicts'
                UNION SELECT dst_id FROM links WHERE kind <> 'contradicts'
            )
            SELECT {LEAN_COLUMNS.replace("id, ", "m.id, ", 1)},
                   {cosine} AS cosine,
                   lk.dst_ids, lk.weights, lk.kinds
            FROM memories m JOIN wanted w ON w.id = m.id
            LEFT JOIN LATERAL (  -- its links out, as arrays: binary ids and floats, not text to parse
                SELECT array_agg(l.dst_id) AS dst_ids, array_agg(CAST(l.weight AS double precision)) AS weights,
                       array_agg(l.kind) AS kinds
                FROM links l WHERE l.src_id = m.id
            ) lk ON true
            """,
        params
        | {
            "ids": list(seed_ids),
            "known": list(known_cosine),
            "user_id": user_id,
            "max_hops": max_hops,
        },
        as_dicts=True,
    )
    memories: dict[uuid.UUID, dict[str, Any]] = {}
    links: list[tuple[uuid.UUID, uuid.UUID, float]] = []
    order: list[tuple[uuid.UUID, uuid.UUID, float]] = []
    contradicts: list[tuple[uuid.UUID, uuid.UUID]] = []
    for row in rows:
        if row["user_id"] != user_id:  # looked up by primary key; the tenant is checked on the rows
            continue
        src = row["id"]
        out = (row.pop("dst_ids") or (), row.pop("weights") or (), row.pop("kinds") or ())
        for dst, weight, kind in zip(*out, strict=True):  # aggregated from the same rows
            if kind == "contradicts":
                contradicts.append((src, dst))
                continue
            links.append((src, dst, weight))  # association links and reading order (`next`) both spread
            if kind == "next":
                order.append((src, dst, weight))
        memories[row["id"]] = row
    return FetchedLinks(memories, links, order, contradicts)


def _cosine_branches(
    queries: Mapping[str, SectorVector], ladder: Callable[[int], Sequence[int]], params: dict[str, Any]
) -> str:
    """SQL `WHEN … THEN` branches giving memory `m` the query's similarity to its primary-sector vector (a
    compressed memory compared with the query pooled to its rung); adds the query vectors to `params`."""
    branches = []
    for g, (query, sectors) in enumerate(group_sectors(queries)):
        params |= {f"model{g}": query.model, f"qs{g}": sectors}
        rungs = query_rungs(query.vector, ladder)
        for dim, vector in rungs.items():
            params[f"q{g}_{dim}"] = Vector(vector)
        pooled_query = " ".join(f"WHEN {dim} THEN CAST(:q{g}_{dim} AS vector)" for dim in rungs)
        branches.append(
            f"""WHEN m.primary_sector = ANY(CAST(:qs{g} AS text[])) THEN
                       (SELECT 1 - (v.embedding <=> CASE v.dim {pooled_query} END)
                        FROM memory_vectors v
                        WHERE v.memory_id = m.id AND v.sector = m.primary_sector
                          AND v.dim IN ({", ".join(str(d) for d in rungs)}) AND v.model = :model{g})"""
        )
    return " ".join(branches)


def period_candidates(
    session: Session,
    user_id: str,
    queries: Mapping[str, SectorVector],
    *,
    start: datetime,
    end: datetime,
    where: MemoryFilter,
    limit: int,
    scan_limit: int,
    ladder: Callable[[int], Sequence[int]] = lambda dim: (dim,),
) -> list[tuple[uuid.UUID, float]]:
    """The tenant's memories that happened in [start, end) (occurred_at, else when stored) and pass `where`,
    most similar to the query first (best `limit`): the period a query names, searched on its own, so time
    anchoring can rank what happened then even when neither the words nor the vector search found it.

    Exact, not approximate: the `scan_limit` latest memories of the period are compared with the query (the
    (user_id, occurred) index gives them in order), so a narrow period ("yesterday") is searched whole and a
    broad one ("2023" in a large store) costs at most `scan_limit` comparisons. Memories without a vector
    of the query's model (a fingerprint) are left out."""
    if not queries or start >= end:
        return []
    clause, params = where.sql("m")
    branches = _cosine_branches(queries, ladder, params)
    happened = occurred_sql("m")
    rows = read_rows(
        session,
        f"""
            WITH period AS MATERIALIZED (
                SELECT m.id, m.primary_sector FROM memories m
                WHERE m.user_id = :user_id AND {happened} >= :p_start AND {happened} < :p_end{clause}
                ORDER BY {happened} DESC
                LIMIT :scan_limit
            ),
            measured AS (SELECT m.id, CASE {branches} END AS sim FROM period m)
            SELECT id, sim FROM measured WHERE sim IS NOT NULL ORDER BY sim DESC, id LIMIT :limit
            """,
        params | {"user_id": user_id, "p_start": start, "p_end": end, "scan_limit": scan_limit, "limit": limit},
    )
    return [(r.id, float(r.sim)) for r in rows]


def fetch_payloads(session: Session, user_id: str, memory_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
    """Content, summary, metadata and document of the tenant's memories among `memory_ids`."""
    if not memory_ids:
        return {}
    rows = read_rows(
        session,
        "SELECT id, content, summary, meta, document_id FROM memories "
        "WHERE id = ANY(CAST(:ids AS uuid[])) AND user_id = :user_id",
        {"ids": list(memory_ids), "user_id": user_id},
        as_dicts=True,
    )
    return {row["id"]: row_to_dict(row) for row in rows}


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


def analyze_vectors(session: Session, sectors: Iterable[str]) -> None:
    """Refresh planner statistics of vector partitions that just grew.

    With stale statistics after a bulk merge the planner believes a tenant has a handful of vectors and
    sorts them by exact distance instead of walking the HNSW index: milliseconds per search, not 0.4 ms.
    """
    for sector in sorted(set(sectors)):
        validate_sector(sector)
        session.execute(text(f"ANALYZE memory_vectors_{sector}"))


def fresh_backlog(session: Session, user_id: str) -> int:
    """The tenant's vectors waiting for the merge into the HNSW index."""
    return int(
        session.execute(
            text("SELECT count(*) FROM memory_vectors WHERE NOT indexed AND user_id = :user_id"), {"user_id": user_id}
        ).scalar_one()
    )


def fresh_vector_count(session: Session, *, limit: int) -> int:
    """Vectors waiting for the merge, counted up to `limit` (cheap however long the backlog)."""
    return int(
        session.execute(
            text("SELECT count(*) FROM (SELECT 1 FROM memory_vectors WHERE NOT indexed LIMIT :limit) f"),
            {"limit": limit},
        ).scalar_one()
    )


def primary_vectors(
    session: Session, memory_ids: Sequence[uuid.UUID], queries: Mapping[str, SectorVector]
) -> dict[uuid.UUID, np.ndarray]:
    """Each memory's primary-sector vector, of the model its sector is queried with (for MMR)."""
    if not memory_ids:
        return {}
    sectors = list(queries)
    rows = session.execute(
        text(
            """
            SELECT v.memory_id, v.embedding FROM memory_vectors v JOIN memories m ON m.id = v.memory_id
            JOIN unnest(CAST(:sectors AS text[]), CAST(:models AS text[])) AS q(sector, model)
              ON q.sector = m.primary_sector
            WHERE v.memory_id = ANY(CAST(:ids AS uuid[])) AND v.sector = m.primary_sector AND v.model = q.model
            """
        ),
        {
            "ids": [str(i) for i in memory_ids],
            "sectors": sectors,
            "models": [queries[sector].model for sector in sectors],
        },
    ).all()
    return {r.memory_id: _as_array(r.embedding) for r in rows}


def _as_array(value: Any) -> np.ndarray:
    """pgvector gives a Vector (or a numpy array, by version); float32 either way."""
    return np.asarray(value.to_numpy() if isinstance(value, Vector) else value, dtype=np.float32)
