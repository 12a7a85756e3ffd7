"""SQL over memory rows: insert (idempotent on user + content), read, list, change, delete, reinforce, stats.

Functions flush; the caller's boundary commits.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb
from sqlalchemy import text
from sqlalchemy.orm import Session

from shared.db import write_rows
from shared.storage.rows import (
    MEMORY_COLUMNS,
    MemoryFilter,
    NewMemory,
    StoredRef,
    occurred_sql,
    returned_set,
    row_to_dict,
)
from shared.storage.vectors import copy_vectors


def insert_memories(session: Session, memories: Sequence[NewMemory], *, indexed: bool) -> list[StoredRef]:
    """Insert memories and their per-sector vectors; an existing memory with the same (user, content), or the same
    (user, fact) where the memory has a fact hash, is returned, not duplicated (the unique indexes decide, so two
    writers at once make one memory).

    `indexed=False` lands the vectors in the fresh tier (no HNSW cost now; searched through their binary codes until
    merged).
    Returns one reference per input, in input order.
    """
    if not memories:
        return []
    inserted = _insert_rows(session, memories)
    created = {(r.user_id, r.content_hash): r.id for r in inserted}
    missing = [m for m in memories if (m.user_id, m.content_hash) not in created]
    by_content: dict[tuple[str, str], uuid.UUID] = {}
    by_fact: dict[tuple[str, str], uuid.UUID] = {}
    if missing:
        rows = session.execute(
            text(
                "SELECT m.id, m.user_id, m.content_hash, m.fact_hash FROM memories m "
                "JOIN unnest(CAST(:users AS text[]), CAST(:hashes AS text[]), CAST(:facts AS text[])) AS k(u, h, f) "
                "ON m.user_id = k.u AND (m.content_hash = k.h OR m.fact_hash = k.f)"
            ),
            {
                "users": [m.user_id for m in missing],
                "hashes": [m.content_hash for m in missing],
                "facts": [m.fact_hash for m in missing],
            },
        ).all()
        by_content = {(r.user_id, r.content_hash): r.id for r in rows}
        by_fact = {(r.user_id, r.fact_hash): r.id for r in rows if r.fact_hash is not None}

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
        elif key in by_content:
            refs.append(StoredRef(by_content[key], False))
        elif m.fact_hash is not None and (m.user_id, m.fact_hash) in by_fact:
            refs.append(StoredRef(by_fact[(m.user_id, m.fact_hash)], False, merged=True))
        else:  # deleted between our insert and select: vanishingly rare, and an error is honest
            raise RuntimeError(f"memory for hash {m.content_hash} vanished during insert")
    # The same content twice in one call: only its first occurrence counts as created.
    first_seen: set[uuid.UUID] = set()
    result = []
    for ref in refs:
        result.append(StoredRef(ref.id, ref.created and ref.id not in first_seen, ref.merged))
        first_seen.add(ref.id)
    return result


# The rows in from binary arrays (psycopg's `%b`), one array a column, not a JSON document parsed again on the
# server; a memory's sectors and tags (lists of any length) are slices of one flat array each.
_INSERT = """
INSERT INTO memories (user_id, content, content_hash, fact_hash, primary_sector, sectors, tags, meta, salience,
                      decay_lambda, confidence, classification_confidence, document_id, chunk_index, occurred_at)
SELECT r.user_id, r.content, r.content_hash, r.fact_hash, r.primary_sector,
       (%(sectors)b::text[])[r.sectors_from:r.sectors_to], (%(tags)b::text[])[r.tags_from:r.tags_to],
       r.meta, r.salience, r.decay_lambda, r.confidence, r.classification_confidence, r.document_id,
       r.chunk_index, r.occurred_at
FROM unnest(%(user_id)b::text[], %(content)b::text[], %(content_hash)b::text[], %(fact_hash)b::text[],
            %(primary_sector)b::text[], %(sectors_from)b::int4[], %(sectors_to)b::int4[], %(tags_from)b::int4[],
            %(tags_to)b::int4[], %(meta)b::jsonb[], %(salience)b::float4[], %(decay_lambda)b::float4[],
            %(confidence)b::float4[], %(classification_confidence)b::float4[], %(document_id)b::uuid[],
            %(chunk_index)b::int4[], %(occurred_at)b::timestamptz[])
    AS r(user_id, content, content_hash, fact_hash, primary_sector, sectors_from, sectors_to, tags_from, tags_to,
         meta, salience, decay_lambda, confidence, classification_confidence, document_id, chunk_index, occurred_at)
ON CONFLICT DO NOTHING
RETURNING id, user_id, content_hash
"""


def _insert_rows(session: Session, memories: Sequence[NewMemory]) -> list[Any]:
    """`_INSERT` of `memories`: the rows created (`id`, `user_id`, `content_hash`); the others exist already."""
    sectors: list[str] = []
    tags: list[str] = []
    bounds: dict[str, list[int]] = {"sectors_from": [], "sectors_to": [], "tags_from": [], "tags_to": []}
    for m in memories:  # 1-based, inclusive: an empty list is the slice [n + 1:n]
        for name, flat, values in (("sectors", sectors, m.sectors), ("tags", tags, m.tags)):
            bounds[f"{name}_from"].append(len(flat) + 1)
            flat.extend(values)
            bounds[f"{name}_to"].append(len(flat))
    columns: dict[str, Any] = {
        "user_id": [m.user_id for m in memories],
        "content": [m.content for m in memories],
        "content_hash": [m.content_hash for m in memories],
        "fact_hash": [m.fact_hash for m in memories],
        "primary_sector": [m.primary_sector for m in memories],
        "sectors": sectors,
        "tags": tags,
        "meta": [Jsonb(m.meta) for m in memories],
        "salience": [float(m.salience) for m in memories],
        "decay_lambda": [float(m.decay_lambda) for m in memories],
        "confidence": [float(m.confidence) for m in memories],
        "classification_confidence": [float(m.classification_confidence) for m in memories],
        "document_id": [m.document_id for m in memories],
        "chunk_index": [m.chunk_index for m in memories],
        "occurred_at": [m.occurred_at for m in memories],
        **bounds,
    }
    return write_rows(session, _INSERT, columns)


def get_memory(session: Session, user_id: str, memory_id: uuid.UUID) -> dict[str, Any] | None:
    row = session.execute(
        text(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = :id AND user_id = :user_id"),
        {"id": memory_id, "user_id": user_id},
    ).first()
    return row_to_dict(row) if row else None


def owner_of(session: Session, memory_id: uuid.UUID) -> str | None:
    """The tenant a memory belongs to, whoever it is: a store-wide lookup (the maintenance role's), for a caller who
    may act for any tenant and names only the memory's id."""
    return session.execute(text("SELECT user_id FROM memories WHERE id = :id"), {"id": memory_id}).scalar_one_or_none()


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


def version_rows(session: Session, user_id: str, memory_ids: Sequence[uuid.UUID]) -> list[dict[str, Any]]:
    """What the update decision reads of memories: id, content, meta, status, and when it `happened`."""
    rows = session.execute(
        text(
            f"SELECT id, content, meta, status, {occurred_sql('m')} AS happened FROM memories m "
            "WHERE m.id = ANY(CAST(:ids AS uuid[])) AND m.user_id = :user_id"
        ),
        {"ids": list(memory_ids), "user_id": user_id},
    ).all()
    return [dict(r._mapping) for r in rows]


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


def replace_content(session: Session, user_id: str, memory_id: uuid.UUID, new: NewMemory) -> None:
    """Swap a memory's content, classification and vectors in place (PATCH with new content)."""
    session.execute(
        text(
            "UPDATE memories SET content = :content, content_hash = :content_hash, fact_hash = :fact_hash, "
            "summary = NULL, "
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
            "fact_hash": new.fact_hash,
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


def content_hash_owner(
    session: Session, user_id: str, content_hash: str, fact_hash: str | None = None, *, other_than: uuid.UUID
) -> uuid.UUID | None:
    """A memory other than `other_than` that holds this content (or this fact, given its hash), if one does."""
    return session.execute(
        text(
            "SELECT id FROM memories WHERE user_id = :u AND (content_hash = :h OR fact_hash = :f) AND id <> :self "
            "LIMIT 1"
        ),
        {"u": user_id, "h": content_hash, "f": fact_hash, "self": other_than},
    ).scalar_one_or_none()


# A client used the memory (shared.lifecycle.formulas.confirmed): the boost first confirms recall lift
CONFIRMED_SET = (
    "salience = LEAST(1.0, salience + :boost), recall_lift = GREATEST(0.0, recall_lift - :boost), last_used_at = now()"
)


def reinforce(session: Session, user_id: str, memory_ids: Sequence[uuid.UUID], *, boost: float) -> list[dict[str, Any]]:
    """A client said it used these memories (POST /memory/reinforce): salience + `boost` (capped at 1), the boost
    first confirming recall lift (which then counts in ranking in full), seen and used now; returns the updated rows.
    A query's reinforcement of what it returned is `reinforce_returned`."""
    rows = session.execute(
        text(
            f"""
            UPDATE memories SET {CONFIRMED_SET}, last_seen_at = now(), updated_at = now()
            WHERE user_id = :user_id AND id = ANY(CAST(:ids AS uuid[]))
            RETURNING {MEMORY_COLUMNS}
            """
        ),
        {"ids": [str(i) for i in memory_ids], "user_id": user_id, "boost": boost},
    ).all()
    return [row_to_dict(r) for r in rows]


def reinforce_returned(session: Session, user_id: str, times: Mapping[uuid.UUID, int], *, boost: float) -> int:
    """Query reinforcement (decay seed, "Automatic Reinforcement on Query") of memories returned `times[id]` times
    (by as many queries), in one statement: salience + `boost` a query (capped at 1), what that added is recall lift
    too (RETURNED_SET), a coactivation a query. The same as once per query, since a capped gain adds up (min(1,
    min(1, s + b) + b) is min(1, s + 2b)). How many memories it found."""
    if not times:
        return 0
    # in id order, as every batch does: two batches updating the same memories then lock them in the same order
    ids, counts = zip(*sorted(times.items()), strict=True)
    result = session.execute(
        text(
            f"""
            UPDATE memories m SET {returned_set(":boost * t.n")},
                   last_seen_at = now(), updated_at = now(), coactivations = coactivations + t.n
            FROM unnest(CAST(:ids AS uuid[]), CAST(:counts AS integer[])) AS t(id, n)
            WHERE m.user_id = :user_id AND m.id = t.id
            """
        ),
        {"ids": [str(i) for i in ids], "counts": list(counts), "user_id": user_id, "boost": boost},
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


def tier_counts(session: Session) -> list[tuple[str, str, int]]:
    """(sector, tier, memories) over the whole store, for the metrics endpoint."""
    rows = session.execute(
        text("SELECT primary_sector AS sector, tier, count(*) AS n FROM memories GROUP BY 1, 2")
    ).all()
    return [(r.sector, r.tier, int(r.n)) for r in rows]


def lifecycle_stats(session: Session, user_id: str | None) -> dict[str, Any]:
    """Tier counts, compression states and average salience (of one tenant, or of the whole store)."""
    row = session.execute(
        text(
            """
            SELECT count(*) AS memories,
                   count(*) FILTER (WHERE tier = 'hot') AS hot,
                   count(*) FILTER (WHERE tier = 'warm') AS warm,
                   count(*) FILTER (WHERE tier = 'cold') AS cold,
                   count(*) FILTER (WHERE compression = 'full') AS full,
                   count(*) FILTER (WHERE compression = 'compressed') AS compressed,
                   count(*) FILTER (WHERE compression = 'fingerprinted') AS fingerprinted,
                   avg(salience) AS avg_salience
            FROM memories WHERE CAST(:user_id AS text) IS NULL OR user_id = :user_id
            """
        ),
        {"user_id": user_id},
    ).one()
    dims = session.execute(
        text(
            "SELECT vector_dim, count(*) AS n FROM memories WHERE compression = 'compressed' "
            "AND (CAST(:user_id AS text) IS NULL OR user_id = :user_id) GROUP BY vector_dim ORDER BY vector_dim DESC"
        ),
        {"user_id": user_id},
    ).all()
    out = dict(row._mapping)
    out["avg_salience"] = round(float(out["avg_salience"] or 0.0), 4)
    out["compressed_by_dim"] = {str(r.vector_dim): int(r.n) for r in dims}
    return out
