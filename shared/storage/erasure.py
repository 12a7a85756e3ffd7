"""All SQL of erasing: a tenant's rows table by table in batches, what is left of it anywhere, a document and its
memories.

Which tables hold a tenant's rows is read from the catalogue (every table with a `user_id` column), so a table
added later is erased, or at least found not empty, without anyone remembering this module. Rows whose table
names no tenant go with their parent: vectors and waypoints with their memories, staged uploads with their
document, chunks with their job; the embedder's log rows of the tenant's jobs are deleted by job.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.orm import Session

# Erased in this order (a memory names its document, a document its job: each goes before what it names), each
# batch by its key; a table the catalogue shows besides these is erased after them, whole.
ORDER: dict[str, str] = {
    "memories": "id",
    "waypoints": "src_id, dst_id, kind",  # gone with their memories; left only if one end were another's
    "memory_vectors": "memory_id, sector",  # likewise (its primary key's order)
    "fresh_codes": "sector, memory_id",  # likewise
    "documents": "id",
    "jobs": "id",
    "conversation_heads": "key",
    "term_stats": "lexeme",
    "tenant_stats": "user_id",
}


# deleted with their memories: not counted as work of their own
CASCADED = frozenset({"waypoints", "memory_vectors", "fresh_codes"})


def tenant_tables(session: Session) -> list[str]:
    """Every table of the schema with a user_id column (partitions counted by their parent), ORDER's first."""
    rows = session.execute(
        text(
            """
            SELECT c.relname FROM pg_attribute a
            JOIN pg_class c ON c.oid = a.attrelid
            JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE a.attname = 'user_id' AND NOT a.attisdropped AND c.relkind IN ('r', 'p') AND NOT c.relispartition
              AND n.nspname = current_schema()
            ORDER BY c.relname
            """
        )
    ).scalars()
    found = list(rows)
    return [t for t in ORDER if t in found] + [t for t in found if t not in ORDER]


def _table(name: str, tables: Sequence[str]) -> str:
    if name not in tables:  # names come from the catalogue: refuse anything else before it reaches SQL
        raise ValueError(f"{name!r} is not a table with a user_id column")
    return name


def delete_batch(session: Session, table: str, user_id: str, *, limit: int, tables: Sequence[str]) -> int:
    """Delete up to `limit` of the tenant's rows of `table` (a table of `tenant_tables`); how many."""
    name = _table(table, tables)
    key = ORDER.get(name)
    if key is None:
        result = session.execute(text(f"DELETE FROM {name} WHERE user_id = :u"), {"u": user_id})
    else:
        result = session.execute(
            text(
                f"DELETE FROM {name} WHERE user_id = :u AND ({key}) IN "
                f"(SELECT {key} FROM {name} WHERE user_id = :u LIMIT :n)"
            ),
            {"u": user_id, "n": limit},
        )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def job_ids(session: Session, user_id: str, *, limit: int) -> list[uuid.UUID]:
    """Up to `limit` of the tenant's jobs."""
    rows = session.execute(text("SELECT id FROM jobs WHERE user_id = :u LIMIT :n"), {"u": user_id, "n": limit})
    return list(rows.scalars())


def open_jobs(session: Session, user_id: str) -> list[uuid.UUID]:
    rows = session.execute(
        text("SELECT id FROM jobs WHERE user_id = :u AND status IN ('queued', 'running') ORDER BY created_at"),
        {"u": user_id},
    )
    return list(rows.scalars())


def delete_jobs(session: Session, ids: Sequence[uuid.UUID]) -> int:
    """Delete these jobs (their chunks go with them); how many."""
    result = session.execute(
        text("DELETE FROM jobs WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": [str(i) for i in ids]}
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def delete_embed_logs(session: Session, ids: Sequence[uuid.UUID]) -> int:
    """The embedder's log rows of these jobs (the maintenance role's: tenants only append to embed_logs)."""
    result = session.execute(
        text("DELETE FROM embed_logs WHERE job_id = ANY(CAST(:ids AS uuid[]))"), {"ids": [str(i) for i in ids]}
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def counts(session: Session, user_id: str, tables: Sequence[str]) -> dict[str, int]:
    """The tenant's rows in each of `tables` (those with none left out)."""
    found = {}
    for table in tables:
        n = session.execute(
            text(f"SELECT count(*) FROM {_table(table, tables)} WHERE user_id = :u"), {"u": user_id}
        ).scalar_one()
        if n:
            found[table] = int(n)
    return found


def document_memories(session: Session, user_id: str, document_id: uuid.UUID) -> list[uuid.UUID]:
    rows = session.execute(
        text("SELECT id FROM memories WHERE user_id = :u AND document_id = :d"), {"u": user_id, "d": document_id}
    )
    return list(rows.scalars())


def delete_memories(session: Session, user_id: str, ids: Sequence[uuid.UUID]) -> int:
    """Delete these memories of the tenant (vectors and waypoints cascade); how many."""
    result = session.execute(
        text("DELETE FROM memories WHERE user_id = :u AND id = ANY(CAST(:ids AS uuid[]))"),
        {"u": user_id, "ids": [str(i) for i in ids]},
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def delete_document(session: Session, user_id: str, document_id: uuid.UUID) -> bool:
    """Delete a document of the tenant (its staged upload cascades; duplicates of it forget it)."""
    row = session.execute(
        text("DELETE FROM documents WHERE id = :d AND user_id = :u RETURNING id"), {"u": user_id, "d": document_id}
    ).first()
    return row is not None


def set_total(session: Session, job_id: uuid.UUID, total: int) -> None:
    """An erasure's progress total: the tenant's rows when it began."""
    session.execute(
        text("UPDATE jobs SET progress_total = :n, updated_at = now() WHERE id = :id"), {"id": job_id, "n": total}
    )


def add_done(session: Session, job_id: uuid.UUID, rows: int) -> None:
    session.execute(
        text("UPDATE jobs SET progress_done = progress_done + :n, updated_at = now() WHERE id = :id"),
        {"id": job_id, "n": rows},
    )


def forget_tenant_of_job(session: Session, job_id: uuid.UUID) -> None:
    """A finished erasure keeps no trace of whom it erased: the user id leaves the job's parameters."""
    session.execute(text("UPDATE jobs SET params = params - 'user_id' WHERE id = :id"), {"id": job_id})
