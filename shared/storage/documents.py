"""All SQL over ingested documents, their staged upload bytes and their reading-order links."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, Any

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

DOCUMENT_COLUMNS = (
    "id, user_id, source_type, source_uri, filename, mime_type, format, byte_size, content_hash, url_hash, status, "
    "chunk_count, meta, error, job_id, duplicate_of, created_at, updated_at"
)
_QUALIFIED = ", ".join("d." + column.strip() for column in DOCUMENT_COLUMNS.split(","))
UPLOAD_PART_BYTES = 1024 * 1024


def insert_document(
    session: Session,
    *,
    user_id: str,
    source_type: str,
    source_uri: str | None,
    filename: str | None,
    mime_type: str | None,
    fmt: str | None,
    byte_size: int | None,
    content_hash: str | None,
    url_hash: str | None,
    meta: dict[str, Any],
) -> uuid.UUID | None:
    """A new document row; None when the user already has one with this content (or URL)."""
    return session.execute(
        text(
            """
            INSERT INTO documents (user_id, source_type, source_uri, filename, mime_type, format, byte_size,
                                   content_hash, url_hash, meta)
            VALUES (:user_id, :source_type, :source_uri, :filename, :mime_type, :format, :byte_size,
                    :content_hash, :url_hash, CAST(:meta AS jsonb))
            ON CONFLICT DO NOTHING
            RETURNING id
            """
        ),
        {
            "user_id": user_id,
            "source_type": source_type,
            "source_uri": source_uri,
            "filename": filename,
            "mime_type": mime_type,
            "format": fmt,
            "byte_size": byte_size,
            "content_hash": content_hash,
            "url_hash": url_hash,
            "meta": json.dumps(meta),
        },
    ).scalar_one_or_none()


def find_existing(
    session: Session, user_id: str, *, content_hash: str | None, url_hash: str | None
) -> dict[str, Any] | None:
    """The user's document with this content hash or URL hash, locked for this transaction."""
    column, value = ("url_hash", url_hash) if url_hash is not None else ("content_hash", content_hash)
    row = session.execute(
        text(f"SELECT {DOCUMENT_COLUMNS} FROM documents WHERE user_id = :u AND {column} = :v FOR UPDATE"),
        {"u": user_id, "v": value},
    ).first()
    return dict(row._mapping) if row else None


def attach_job(session: Session, document_id: uuid.UUID, job_id: uuid.UUID, *, restart: bool = False) -> None:
    """Give a document its (new) ingest job; `restart` also clears what a failed attempt left behind."""
    session.execute(
        text(
            "UPDATE documents SET job_id = :job, updated_at = now()"
            + (
                ", status = 'queued', error = NULL, chunk_count = 0, duplicate_of = NULL, "
                "content_hash = CASE WHEN url_hash IS NULL THEN content_hash END"
                if restart
                else ""
            )
            + " WHERE id = :id"
        ),
        {"id": document_id, "job": job_id},
    )


def stage_upload(session: Session, document_id: uuid.UUID, source: IO[bytes]) -> int:
    """Copy an upload into PostgreSQL in UPLOAD_PART_BYTES parts (never the whole file in memory); its size."""
    session.execute(text("DELETE FROM document_uploads WHERE document_id = :id"), {"id": document_id})
    size = part = 0
    while block := source.read(UPLOAD_PART_BYTES):
        session.execute(
            text("INSERT INTO document_uploads (document_id, part, data) VALUES (:id, :part, :data)"),
            {"id": document_id, "part": part, "data": block},
        )
        size += len(block)
        part += 1
    return size


def read_upload(session: Session, document_id: uuid.UUID, target: IO[bytes]) -> int:
    """Write a staged upload into `target`, one part at a time; the bytes written (0 if nothing is staged)."""
    size = 0
    for block in _parts(session, document_id):
        target.write(block)
        size += len(block)
    return size


def _parts(session: Session, document_id: uuid.UUID) -> Iterator[bytes]:
    part = 0
    while True:
        block = session.execute(
            text("SELECT data FROM document_uploads WHERE document_id = :id AND part = :part"),
            {"id": document_id, "part": part},
        ).scalar_one_or_none()
        if block is None:
            return
        yield bytes(block)
        part += 1


def read_uploads(session: Session, targets: Mapping[uuid.UUID, IO[bytes]]) -> dict[uuid.UUID, int]:
    """`read_upload` for several documents in one statement: each one's staged bytes written into its target, in
    order; the bytes written for each (0 if nothing is staged)."""
    sizes = dict.fromkeys(targets, 0)
    rows = session.execute(
        text(
            "SELECT document_id, data FROM document_uploads WHERE document_id = ANY(CAST(:ids AS uuid[])) "
            "ORDER BY document_id, part"
        ),
        {"ids": list(targets)},
    )
    for document_id, block in rows:
        targets[document_id].write(bytes(block))
        sizes[document_id] += len(block)
    return sizes


def mark_extracting(session: Session, document_ids: Sequence[uuid.UUID]) -> None:
    """Move documents to `extracting` (a cancelled one stays cancelled), their errors kept: a group's claim."""
    session.execute(
        text(
            "UPDATE documents SET status = 'extracting', updated_at = now() "
            "WHERE id = ANY(CAST(:ids AS uuid[])) AND status <> 'cancelled'"
        ),
        {"ids": list(document_ids)},
    )


def delete_upload(session: Session, document_id: uuid.UUID) -> None:
    session.execute(text("DELETE FROM document_uploads WHERE document_id = :id"), {"id": document_id})


def get_document(session: Session, document_id: uuid.UUID, user_id: str | None = None) -> dict[str, Any] | None:
    row = session.execute(
        text(
            f"SELECT {DOCUMENT_COLUMNS} FROM documents "
            "WHERE id = :id AND (CAST(:user_id AS text) IS NULL OR user_id = :user_id)"
        ),
        {"id": document_id, "user_id": user_id},
    ).first()
    return dict(row._mapping) if row else None


def document_of_job(session: Session, job_id: uuid.UUID, *, lock: bool = False) -> dict[str, Any] | None:
    """The document an ingest job works on (locked for this transaction with `lock`)."""
    row = session.execute(
        text(f"SELECT {DOCUMENT_COLUMNS} FROM documents WHERE job_id = :job" + (" FOR UPDATE" if lock else "")),
        {"job": job_id},
    ).first()
    return dict(row._mapping) if row else None


def set_status(
    session: Session,
    document_id: uuid.UUID,
    status: str,
    *,
    error: str | None = None,
    meta: dict[str, Any] | None = None,
    chunk_count: int | None = None,
    fmt: str | None = None,
    duplicate_of: uuid.UUID | None = None,
) -> None:
    """Move a document to `status`, merging `meta` into its metadata and recording what else is given; a cancelled
    document stays cancelled (its worker may still be extracting: what it finds changes nothing)."""
    session.execute(
        text(
            """
            UPDATE documents SET status = :status, error = :error, meta = meta || CAST(:meta AS jsonb),
                chunk_count = COALESCE(:chunks, chunk_count), format = COALESCE(:format, format),
                duplicate_of = COALESCE(:duplicate_of, duplicate_of), updated_at = now()
            WHERE id = :id AND status <> 'cancelled'
            """
        ),
        {
            "id": document_id,
            "status": status,
            "error": error[:4000] if error else None,
            "meta": json.dumps(meta or {}),
            "chunks": chunk_count,
            "format": fmt,
            "duplicate_of": duplicate_of,
        },
    )


def claim_content_hash(
    session: Session, document_id: uuid.UUID, user_id: str, content_hash: str, byte_size: int
) -> uuid.UUID | None:
    """Record a fetched document's content hash; the id of the user's other document with it, if any."""
    other = session.execute(
        text("SELECT id FROM documents WHERE user_id = :u AND content_hash = :h AND id <> :id"),
        {"u": user_id, "h": content_hash, "id": document_id},
    ).scalar_one_or_none()
    if other is not None:
        return uuid.UUID(str(other))
    try:
        with session.begin_nested():
            session.execute(
                text("UPDATE documents SET content_hash = :h, byte_size = :size, updated_at = now() WHERE id = :id"),
                {"id": document_id, "h": content_hash, "size": byte_size},
            )
    except IntegrityError:  # the same content committed by another document a moment ago
        return claim_content_hash(session, document_id, user_id, content_hash, byte_size)
    return None


def link_reading_order(session: Session, document_id: uuid.UUID) -> int:
    """A `next` waypoint from each chunk's memory to the following chunk's (idempotent); links made."""
    result = session.execute(
        text(
            """
            INSERT INTO waypoints (src_id, dst_id, user_id, kind, weight)
            SELECT id, next_id, user_id, 'next', 1.0 FROM (
                SELECT id, user_id, lead(id) OVER (ORDER BY chunk_index, id) AS next_id
                FROM memories WHERE document_id = :id
            ) ordered
            WHERE next_id IS NOT NULL
            ON CONFLICT (src_id, dst_id, kind) DO NOTHING
            """
        ),
        {"id": document_id},
    )
    return int(getattr(result, "rowcount", 0) or 0)


def list_documents(
    session: Session, user_id: str, *, offset: int, limit: int, status: str | None
) -> tuple[list[dict[str, Any]], int]:
    """A user's documents, newest first, and how many there are."""
    params = {"u": user_id, "status": status, "offset": offset, "limit": limit}
    where = "user_id = :u AND (CAST(:status AS text) IS NULL OR status = :status)"
    rows = session.execute(
        text(
            f"SELECT {DOCUMENT_COLUMNS} FROM documents WHERE {where} "
            "ORDER BY created_at DESC, id DESC OFFSET :offset LIMIT :limit"
        ),
        params,
    ).all()
    total = session.execute(text(f"SELECT count(*) FROM documents WHERE {where}"), params).scalar_one()
    return [dict(r._mapping) for r in rows], int(total)


def document_memories(
    session: Session, user_id: str, document_id: uuid.UUID, *, offset: int, limit: int
) -> tuple[list[dict[str, Any]], int]:
    """The memories made from a document's chunks, in reading order, and how many there are."""
    params = {"u": user_id, "d": document_id, "offset": offset, "limit": limit}
    rows = session.execute(
        text(
            "SELECT id, chunk_index, primary_sector, left(content, 200) AS preview FROM memories "
            "WHERE user_id = :u AND document_id = :d ORDER BY chunk_index, id OFFSET :offset LIMIT :limit"
        ),
        params,
    ).all()
    total = session.execute(
        text("SELECT count(*) FROM memories WHERE user_id = :u AND document_id = :d"), params
    ).scalar_one()
    return [dict(r._mapping) for r in rows], int(total)


def stalled_ingest_jobs(session: Session, *, stall_seconds: float) -> list[tuple[uuid.UUID, str]]:
    """Open ingest jobs whose next step must be sent again, locked until the caller's commit: (job, tenant).

    Claimed by a worker that died (the lease its heartbeat renewed ran out); sent but never claimed for
    `stall_seconds` (the message was lost; in a backlog, the duplicate finds the step claimed or done and leaves
    without counting an attempt); or every chunk stored but the document never finished.
    """
    rows = session.execute(
        text(
            """
            SELECT j.id, j.user_id FROM jobs j JOIN documents d ON d.job_id = j.id
            WHERE j.kind = 'ingest' AND j.status IN ('queued', 'running')
              AND (
                (d.status IN ('queued', 'extracting') AND j.lease_until < now())
                OR (d.status IN ('queued', 'extracting') AND j.lease_until IS NULL
                    AND j.updated_at < now() - make_interval(secs => :stall))
                OR (d.status = 'embedding' AND j.updated_at < now() - make_interval(secs => :stall)
                    AND NOT EXISTS (SELECT 1 FROM job_chunks c WHERE c.job_id = j.id AND c.status <> 'done'))
              )
            ORDER BY j.updated_at
            LIMIT 1000
            FOR UPDATE OF j SKIP LOCKED
            """
        ),
        {"stall": stall_seconds},
    ).all()
    return [(r.id, r.user_id) for r in rows]


def status_counts(session: Session) -> list[tuple[str, str, int]]:
    """(format, status, documents) over the whole store, for the metrics endpoint."""
    rows = session.execute(
        text("SELECT coalesce(format, 'unknown') AS format, status, count(*) AS n FROM documents GROUP BY 1, 2")
    ).all()
    return [(r.format, r.status, int(r.n)) for r in rows]


def queued_small_uploads(
    session: Session, *, user_id: str, besides: uuid.UUID, formats: list[str], max_bytes: int, limit: int
) -> list[dict[str, Any]]:
    """Up to `limit` of the user's queued uploads of `formats` and at most `max_bytes`, other than `besides`,
    whose job was never tried and no worker holds, oldest first; locked until the caller's commit (rows another
    worker has locked are skipped)."""
    rows = session.execute(
        text(
            f"""
            SELECT {_QUALIFIED} FROM documents d
            JOIN jobs j ON j.id = d.job_id
            WHERE d.user_id = :user_id AND d.id <> :besides AND d.status = 'queued' AND d.source_type = 'upload'
              AND d.format = ANY(:formats) AND d.byte_size <= :max_bytes
              AND j.status = 'queued' AND j.attempts = 0 AND (j.lease_until IS NULL OR j.lease_until < now())
            ORDER BY d.created_at
            LIMIT :limit
            FOR UPDATE OF d, j SKIP LOCKED
            """
        ),
        {"user_id": user_id, "besides": besides, "formats": formats, "max_bytes": max_bytes, "limit": limit},
    ).all()
    return [dict(r._mapping) for r in rows]
