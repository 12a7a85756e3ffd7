"""All SQL of moving a tenant's data out and in: pages of its documents, memories (with their vectors) and
waypoints for an export, and the rows of an import written as they were (ids, times, state), never over a row
that exists.

Reads page by key (when it was stored, then id), so an export of any size holds one page in memory at a time.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from pgvector import Vector
from sqlalchemy import text
from sqlalchemy.orm import Session

from shared.db import read_rows

Cursor = tuple[datetime, uuid.UUID]  # the last row of a page: (created_at, id)

DOCUMENT_COLUMNS = (
    "id, source_type, source_uri, filename, mime_type, format, byte_size, content_hash, url_hash, status, "
    "chunk_count, meta, error, duplicate_of, created_at, updated_at"
)
EXPORTED_COLUMNS = (
    "id, content, meta, tags, primary_sector, sectors, salience, recall_lift, decay_lambda, coactivations, tier, "
    "status, confidence, classification_confidence, compression, vector_dim, summary, version, created_at, "
    "updated_at, last_seen_at, last_used_at, occurred_at, valid_to, document_id, chunk_index"
)


def _after(cursor: Cursor | None) -> tuple[str, dict[str, Any]]:
    if cursor is None:
        return "", {}
    return " AND (created_at, id) > (:after_at, :after_id)", {"after_at": cursor[0], "after_id": cursor[1]}


def document_page(session: Session, user_id: str, *, after: Cursor | None, limit: int) -> list[dict[str, Any]]:
    """The tenant's next documents, oldest first."""
    clause, params = _after(after)
    rows = session.execute(
        text(f"SELECT {DOCUMENT_COLUMNS} FROM documents WHERE user_id = :u{clause} ORDER BY created_at, id LIMIT :n"),
        {"u": user_id, "n": limit} | params,
    ).all()
    return [dict(r._mapping) for r in rows]


@dataclass(frozen=True)
class StoredVector:
    sector: str
    model: str
    indexed: bool
    vector: np.ndarray  # float32


def memory_page(
    session: Session, user_id: str, *, after: Cursor | None, limit: int, vectors: bool
) -> list[tuple[dict[str, Any], list[StoredVector]]]:
    """The tenant's next memories, oldest first, each with its vectors (read in binary; `vectors=False`: only
    whether they are indexed)."""
    clause, params = _after(after)
    rows = session.execute(
        text(f"SELECT {EXPORTED_COLUMNS} FROM memories WHERE user_id = :u{clause} ORDER BY created_at, id LIMIT :n"),
        {"u": user_id, "n": limit} | params,
    ).all()
    if not rows:
        return []
    found = read_rows(
        session,
        "SELECT memory_id, sector, model, indexed, "
        + ("embedding" if vectors else "NULL::vector AS embedding")
        + " FROM memory_vectors WHERE memory_id = ANY(:ids) ORDER BY memory_id, sector",
        {"ids": [r.id for r in rows]},
    )
    by_memory: dict[uuid.UUID, list[StoredVector]] = {}
    for v in found:
        array = np.asarray(v.embedding.to_numpy() if isinstance(v.embedding, Vector) else (v.embedding or []))
        by_memory.setdefault(v.memory_id, []).append(
            StoredVector(v.sector, v.model, bool(v.indexed), array.astype(np.float32, copy=False))
        )
    return [(dict(r._mapping), by_memory.get(r.id, [])) for r in rows]


def memory_keys(session: Session, user_id: str, *, after: Cursor | None, limit: int) -> list[Cursor]:
    """The tenant's next memories as (created_at, id), oldest first."""
    clause, params = _after(after)
    rows = session.execute(
        text(f"SELECT created_at, id FROM memories WHERE user_id = :u{clause} ORDER BY created_at, id LIMIT :n"),
        {"u": user_id, "n": limit} | params,
    ).all()
    return [(r.created_at, r.id) for r in rows]


def waypoints_from(session: Session, user_id: str, memory_ids: Sequence[uuid.UUID]) -> list[dict[str, Any]]:
    """The waypoints leaving these memories (each waypoint once: by its source)."""
    if not memory_ids:
        return []
    rows = session.execute(
        text(
            "SELECT src_id, dst_id, kind, weight, created_at, updated_at FROM waypoints "
            "WHERE src_id = ANY(CAST(:ids AS uuid[])) AND user_id = :u ORDER BY src_id, dst_id, kind"
        ),
        {"ids": [str(i) for i in memory_ids], "u": user_id},
    ).all()
    return [dict(r._mapping) for r in rows]


def known_memories(
    session: Session, user_id: str, ids: Sequence[uuid.UUID], hashes: Sequence[str]
) -> tuple[set[uuid.UUID], dict[str, uuid.UUID]]:
    """Of the tenant's memories: which of `ids` it has, and which of the content `hashes`, by which memory."""
    rows = session.execute(
        text(
            "SELECT id, content_hash FROM memories WHERE user_id = :u "
            "AND (id = ANY(CAST(:ids AS uuid[])) OR content_hash = ANY(CAST(:hashes AS text[])))"
        ),
        {"u": user_id, "ids": [str(i) for i in ids], "hashes": list(hashes)},
    ).all()
    wanted = set(ids)
    return {r.id for r in rows if r.id in wanted}, {r.content_hash: r.id for r in rows}


def insert_memories(session: Session, user_id: str, rows: Sequence[dict[str, Any]]) -> set[uuid.UUID]:
    """Insert memories as exported (their ids, times and state); the ids inserted. A row whose id or content the
    store already has is left out, whoever's it is: nothing is overwritten (row-level security hides another
    tenant's row, not the conflict)."""
    if not rows:
        return set()
    inserted = session.execute(
        text(
            """
            INSERT INTO memories (id, user_id, content, content_hash, summary, primary_sector, sectors, tags, meta,
                                  salience, recall_lift, decay_lambda, coactivations, tier, status, confidence,
                                  classification_confidence, compression, vector_dim, fingerprint, version,
                                  created_at, updated_at, last_seen_at, last_used_at, occurred_at, valid_to,
                                  document_id, chunk_index)
            SELECT r.id, :u, r.content, r.content_hash, r.summary, r.primary_sector, r.sectors, r.tags, r.meta,
                   r.salience, r.recall_lift, r.decay_lambda, r.coactivations, r.tier, r.status, r.confidence,
                   r.classification_confidence, r.compression, r.vector_dim, CAST(r.fingerprint AS vector),
                   r.version, r.created_at, r.updated_at, r.last_seen_at, r.last_used_at, r.occurred_at,
                   r.valid_to, r.document_id, r.chunk_index
            FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(
                id uuid, content text, content_hash text, summary text, primary_sector text, sectors text[],
                tags text[], meta jsonb, salience real, recall_lift real, decay_lambda real, coactivations integer,
                tier text, status text, confidence real, classification_confidence real, compression text,
                vector_dim smallint, fingerprint text, version integer, created_at timestamptz,
                updated_at timestamptz, last_seen_at timestamptz, last_used_at timestamptz, occurred_at timestamptz,
                valid_to timestamptz, document_id uuid, chunk_index integer)
            ON CONFLICT DO NOTHING
            RETURNING id
            """
        ),
        {"u": user_id, "rows": json.dumps(list(rows), default=str)},
    ).scalars()
    return set(inserted)


def tenant_documents(session: Session, user_id: str, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Which of `ids` are documents of the tenant."""
    if not ids:
        return set()
    rows = session.execute(
        text("SELECT id FROM documents WHERE user_id = :u AND id = ANY(CAST(:ids AS uuid[]))"),
        {"u": user_id, "ids": [str(i) for i in ids]},
    ).scalars()
    return set(rows)


def insert_document(session: Session, user_id: str, row: dict[str, Any]) -> uuid.UUID | None:
    """Insert a document as exported, with no job; its id if inserted, None when its id or its content (or URL) is
    taken already."""
    return session.execute(
        text(
            """
            INSERT INTO documents (id, user_id, source_type, source_uri, filename, mime_type, format, byte_size,
                                   content_hash, url_hash, status, chunk_count, meta, error, created_at, updated_at)
            VALUES (:id, :u, :source_type, :source_uri, :filename, :mime_type, :format, :byte_size, :content_hash,
                    :url_hash, :status, :chunk_count, CAST(:meta AS jsonb), :error, :created_at, :updated_at)
            ON CONFLICT DO NOTHING
            RETURNING id
            """
        ),
        {**row, "u": user_id, "meta": json.dumps(row["meta"])},
    ).scalar_one_or_none()


def document_with_identity(
    session: Session, user_id: str, *, content_hash: str | None, url_hash: str | None
) -> uuid.UUID | None:
    """The tenant's document with this content or URL, if any."""
    return session.execute(
        text(
            "SELECT id FROM documents WHERE user_id = :u AND (content_hash = :c OR url_hash = :h) "
            "ORDER BY (content_hash = :c) DESC LIMIT 1"
        ),
        {"u": user_id, "c": content_hash, "h": url_hash},
    ).scalar_one_or_none()


def set_duplicate_of(session: Session, user_id: str, pairs: Sequence[tuple[uuid.UUID, uuid.UUID]]) -> None:
    """Point imported duplicates at the documents they duplicate, where that one is the tenant's too."""
    for document_id, original in pairs:
        session.execute(
            text(
                "UPDATE documents SET duplicate_of = :o WHERE id = :id AND user_id = :u AND duplicate_of IS NULL "
                "AND id <> :o AND EXISTS (SELECT 1 FROM documents o WHERE o.id = :o AND o.user_id = :u)"
            ),
            {"id": document_id, "o": original, "u": user_id},
        )


def insert_waypoints(session: Session, user_id: str, rows: Sequence[dict[str, Any]]) -> int:
    """Insert waypoints between two memories of the tenant, as exported (kind, weight, times); one whose ends are
    not both the tenant's is skipped, one that exists is kept as it is. How many were inserted."""
    if not rows:
        return 0
    result = session.execute(
        text(
            """
            INSERT INTO waypoints (src_id, dst_id, user_id, kind, weight, created_at, updated_at)
            SELECT r.src_id, r.dst_id, :u, r.kind, r.weight, r.created_at, r.updated_at
            FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(
                src_id uuid, dst_id uuid, kind text, weight real, created_at timestamptz, updated_at timestamptz)
            JOIN memories a ON a.id = r.src_id AND a.user_id = :u
            JOIN memories b ON b.id = r.dst_id AND b.user_id = :u
            WHERE r.src_id <> r.dst_id
            ON CONFLICT (src_id, dst_id, kind) DO NOTHING
            """
        ),
        {"u": user_id, "rows": json.dumps(list(rows), default=str)},
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def remapped_ids(session: Session, job_id: uuid.UUID, ids: Sequence[str]) -> dict[str, str]:
    """Of `ids` (memory ids of an import's file), those an earlier chunk of the job stored under another id, and
    that id (each memory chunk's result lists its remapped ids)."""
    if not ids:
        return {}
    rows = session.execute(
        text(
            "SELECT e.key, e.value FROM job_chunks c, jsonb_each_text(c.result -> 'remapped') AS e "
            "WHERE c.job_id = :job AND c.result ? 'remapped' AND e.key = ANY(CAST(:ids AS text[]))"
        ),
        {"job": job_id, "ids": list(ids)},
    ).all()
    return {r.key: r.value for r in rows}


def release_held_chunks(session: Session, job_id: uuid.UUID) -> list[tuple[int, str]]:
    """Send-ready now: the job's chunks held back until its other chunks were done (an import's waypoints);
    (seq, sector) of each, for the messages to send after commit. Once per job: a second call finds none."""
    rows = session.execute(
        text(
            "UPDATE job_chunks SET enqueued_at = now() WHERE job_id = :job AND status = 'pending' "
            "AND enqueued_at = 'infinity' RETURNING seq, sector"
        ),
        {"job": job_id},
    ).all()
    return sorted((int(r.seq), str(r.sector)) for r in rows)


def open_unheld_chunks(session: Session, job_id: uuid.UUID) -> int:
    """The job's chunks not done, apart from those held back."""
    return int(
        session.execute(
            text(
                "SELECT count(*) FROM job_chunks WHERE job_id = :job AND status <> 'done' AND enqueued_at <> 'infinity'"
            ),
            {"job": job_id},
        ).scalar_one()
    )


def hold_chunks(session: Session, job_id: uuid.UUID, seqs: Sequence[int]) -> None:
    """Hold these chunks back (never sent, never swept) until `release_held_chunks`."""
    if seqs:
        session.execute(
            text("UPDATE job_chunks SET enqueued_at = 'infinity' WHERE job_id = :job AND seq = ANY(:seqs)"),
            {"job": job_id, "seqs": list(seqs)},
        )
