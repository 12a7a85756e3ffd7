"""All SQL over jobs and their chunks: the database, not the broker, is the record of work."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from shared.backpressure import chunk_cost
from shared.jobs import ChunkSpec
from shared.model.statuses import JobStatus
from shared.storage import job_lookups

JOB_COLUMNS = (
    "id, user_id, kind, status, progress_done, progress_total, attempts, error, params, result, "
    "created_at, updated_at, started_at, finished_at"
)


@dataclass(frozen=True)
class ChunkRef:
    job_id: uuid.UUID
    seq: int
    sector: str
    kind: str = "batch"
    user_id: str = ""  # the job's tenant (what the sweeper's message acts for)
    priority: int | None = None  # the broker priority it was first sent at


def create_job(
    session: Session,
    *,
    user_id: str,
    kind: str,
    total: int,
    params: dict[str, Any],
    idempotency_key: str | None,
    request_hash: str | None = None,
    wait_ms: int | None = None,
) -> tuple[uuid.UUID, bool]:
    """Create a job, or return the existing one for the same idempotency key and request. (id, created).

    Conflict (409) when the key was used for another request (`request_hash` differs); a job made before request
    hashes were kept (NULL) answers any. `wait_ms`: how long the same request sent at once waits for the first one's
    transaction (its uncommitted row) to end, instead of the session's lock timeout."""
    # The losers of identical concurrent requests wait here on the winner's row; a lock timeout shorter than the
    # winner's transaction (its chunks written under load) answered them 503 instead of its job.
    waits = wait_ms and idempotency_key is not None
    restore = session.execute(text("SELECT current_setting('lock_timeout')")).scalar_one() if waits else None
    if restore is not None:
        session.execute(text("SELECT set_config('lock_timeout', :ms, true)"), {"ms": f"{int(wait_ms or 0)}ms"})
    row = session.execute(
        text(
            """
            INSERT INTO jobs (user_id, kind, progress_total, params, idempotency_key, request_hash)
            VALUES (:user_id, :kind, :total, CAST(:params AS jsonb), :key, :hash)
            ON CONFLICT (user_id, kind, idempotency_key) DO NOTHING
            RETURNING id
            """
        ),
        {
            "user_id": user_id,
            "kind": kind,
            "total": total,
            "params": json.dumps(params),
            "key": idempotency_key,
            "hash": request_hash,
        },
    ).first()
    if restore is not None:
        session.execute(text("SELECT set_config('lock_timeout', :ms, true)"), {"ms": restore})
    if row is not None:
        return row.id, True
    existing = job_lookups.idempotent_job(
        session, user_id=user_id, kind=kind, idempotency_key=idempotency_key, request_hash=request_hash
    )
    assert existing is not None  # the conflict that skipped the insert was this row's
    return existing, False


def add_chunks(
    session: Session, job_id: uuid.UUID, chunks: Sequence[ChunkSpec], *, priority: int | None = None
) -> None:
    """Write a job's chunks with their model work (the tenant's backlog) and priority (the sweeper re-sends at it)."""
    payload = [{"seq": c.seq, "sector": c.sector, "items": c.items, "cost": chunk_cost(c.items)} for c in chunks]
    session.execute(
        text(
            """
            INSERT INTO job_chunks (job_id, seq, sector, item_count, items, cost, priority)
            SELECT :job_id, r.seq, r.sector, jsonb_array_length(r.items), r.items, r.cost, CAST(:priority AS smallint)
            FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(seq integer, sector text, items jsonb, cost integer)
            """
        ),
        {"job_id": job_id, "rows": json.dumps(payload), "priority": priority},
    )


def get_job(session: Session, job_id: uuid.UUID, user_id: str | None = None) -> dict[str, Any] | None:
    row = session.execute(
        text(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = :id AND (CAST(:user_id AS text) IS NULL OR user_id = :user_id)"
        ),
        {"id": job_id, "user_id": user_id},
    ).first()
    return dict(row._mapping) if row else None


def pending_chunks(session: Session, job_id: uuid.UUID) -> list[ChunkRef]:
    rows = session.execute(
        text("SELECT job_id, seq, sector FROM job_chunks WHERE job_id = :id AND status = 'pending' ORDER BY seq"),
        {"id": job_id},
    ).all()
    return [ChunkRef(r.job_id, r.seq, r.sector) for r in rows]


def lock_chunk(session: Session, job_id: uuid.UUID, seq: int, owner: str | None = None) -> dict[str, Any] | None:
    """Lock a pending chunk for the transaction that works on it; None when it is done, failed or held by another
    worker. Its attempt was counted before, in a transaction of its own (`leases.claim_chunk`), so that a worker
    killed by the chunk still counts it.

    `owner`: the lease this worker took (`leases.claim_chunk`); if it ran out and another worker claimed the
    chunk meanwhile, the chunk is theirs."""
    row = session.execute(
        text(
            """
            SELECT job_id, seq, sector, items, attempts FROM job_chunks
            WHERE job_id = :job_id AND seq = :seq AND status = 'pending'
              AND (CAST(:owner AS text) IS NULL OR lease_owner = :owner)
            FOR UPDATE SKIP LOCKED
            """
        ),
        {"job_id": job_id, "seq": seq, "owner": owner},
    ).first()
    return dict(row._mapping) if row else None


def complete_chunk(
    session: Session, job_id: uuid.UUID, seq: int, *, done: int, result: dict[str, Any], finish_job: bool = True
) -> str:
    """Mark a chunk done and advance its job; returns the job's status afterwards. "cancelled": the job was cancelled
    (this statement waited for the cancel, or found it): roll back what the chunk stored, it must not count;
    `done_at` is this moment (not the transaction's start, which is when the worker began the chunk).
    finish_job=False: the job stays running after its last chunk (a final step of its own finishes it).
    """
    session.execute(
        text(
            "UPDATE job_chunks SET status = 'done', done_at = clock_timestamp(), result = CAST(:result AS jsonb), "
            "items = '[]', lease_owner = NULL, lease_until = NULL "
            "WHERE job_id = :job_id AND seq = :seq"
        ),
        {"job_id": job_id, "seq": seq, "result": json.dumps(result)},
    )
    return _advance_job(session, job_id, done=done, finish_job=finish_job)


def fail_chunk(
    session: Session, job_id: uuid.UUID, seq: int, *, error: str, final: bool, retry_in: float = 0.0
) -> None:
    """Record a chunk's error and give its lease back; a final failure fails the job (the error is kept for the
    user). Otherwise the retry is due in `retry_in` s, and the sweeper's clock for a lost message starts then."""
    session.execute(
        text(
            "UPDATE job_chunks SET error = :error, status = CASE WHEN :final THEN 'failed' ELSE status END, "
            "lease_owner = NULL, lease_until = NULL, enqueued_at = now() + make_interval(secs => :retry_in) "
            "WHERE job_id = :job_id AND seq = :seq"
        ),
        {"job_id": job_id, "seq": seq, "error": error[:4000], "final": final, "retry_in": retry_in},
    )
    if final:
        session.execute(
            text(
                "UPDATE jobs SET status = 'failed', error = :error, finished_at = now(), updated_at = now() "
                "WHERE id = :id AND status IN ('queued', 'running')"
            ),
            {"id": job_id, "error": f"chunk {seq}: {error}"[:4000]},
        )


def _advance_job(session: Session, job_id: uuid.UUID, *, done: int, finish_job: bool) -> str:
    # Two statements on purpose. The first takes the job row lock; a chunk that finished at the same moment
    # has committed by the time we hold it, but a subquery of that same statement would still read the
    # snapshot from before the wait (both chunks would see the other open and the job would never finish).
    # The second statement reads a fresh snapshot under the lock, so the last chunk to commit sees all done.
    # A cancelled job takes no more progress: the chunk's caller rolls back what it stored (shared.memory.chunks).
    status = session.execute(
        text(
            """
            UPDATE jobs SET progress_done = progress_done + :done,
                status = CASE WHEN status = 'failed' THEN 'failed' ELSE 'running' END, updated_at = now()
            WHERE id = :id AND status <> 'cancelled'
            RETURNING status
            """
        ),
        {"id": job_id, "done": done},
    ).scalar_one_or_none()
    if status is None:
        return JobStatus.CANCELLED
    if finish_job and status != JobStatus.FAILED:
        finished = session.execute(
            text(
                """
                UPDATE jobs SET status = 'succeeded', finished_at = now()
                WHERE id = :id AND NOT EXISTS (SELECT 1 FROM job_chunks c WHERE c.job_id = :id AND c.status <> 'done')
                RETURNING status
                """
            ),
            {"id": job_id},
        ).scalar_one_or_none()
        status = finished or status
    return str(status)


def open_chunk_count(session: Session, job_id: uuid.UUID) -> int:
    """Chunks of the job not done yet (pending or failed)."""
    return int(
        session.execute(
            text("SELECT count(*) FROM job_chunks WHERE job_id = :id AND status <> 'done'"), {"id": job_id}
        ).scalar_one()
    )


def next_seq(session: Session, job_id: uuid.UUID) -> int:
    return int(
        session.execute(
            text("SELECT COALESCE(max(seq) + 1, 0) FROM job_chunks WHERE job_id = :id"), {"id": job_id}
        ).scalar_one()
    )


def grow_job(
    session: Session,
    job_id: uuid.UUID,
    *,
    more_total: int,
    params: dict[str, Any],
    result: dict[str, Any] | None = None,
) -> None:
    """Add work to a job (a later planning round), merge `params` into its parameters and `result` into its result."""
    session.execute(
        text(
            "UPDATE jobs SET progress_total = progress_total + :more, params = params || CAST(:params AS jsonb), "
            "result = result || CAST(:result AS jsonb), "
            "status = CASE WHEN status = 'queued' THEN 'running' ELSE status END, "
            "started_at = COALESCE(started_at, now()), updated_at = now() WHERE id = :id"
        ),
        {"id": job_id, "more": more_total, "params": json.dumps(params), "result": json.dumps(result or {})},
    )


def finish_job(
    session: Session, job_id: uuid.UUID, *, status: str, result: dict[str, Any] | None = None, error: str | None = None
) -> None:
    """End an open job as succeeded or failed, with its result or error."""
    session.execute(
        text(
            "UPDATE jobs SET status = :status, result = result || CAST(:result AS jsonb), error = :error, "
            "finished_at = now(), updated_at = now() WHERE id = :id AND status IN ('queued', 'running')"
        ),
        {"id": job_id, "status": status, "result": json.dumps(result or {}), "error": error},
    )


def open_jobs(session: Session, kind: str) -> list[dict[str, Any]]:
    """Queued or running jobs of one kind, oldest first."""
    rows = session.execute(
        text(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE kind = :kind AND status IN ('queued', 'running') ORDER BY created_at"
        ),
        {"kind": kind},
    ).all()
    return [dict(r._mapping) for r in rows]


def open_job_of(session: Session, user_id: str, kind: str) -> dict[str, Any] | None:
    """The tenant's oldest queued or running job of one kind, if any."""
    row = session.execute(
        text(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE user_id = :user_id AND kind = :kind "
            "AND status IN ('queued', 'running') ORDER BY created_at LIMIT 1"
        ),
        {"user_id": user_id, "kind": kind},
    ).first()
    return dict(row._mapping) if row else None


def count_open(session: Session, user_id: str, kind: str, *, at_most: int) -> int:
    """How many queued or running jobs of one kind the tenant has, counted up to `at_most` (index jobs_open_user)."""
    return int(
        session.execute(
            text(
                "SELECT count(*) FROM (SELECT 1 FROM jobs WHERE user_id = :user_id AND kind = :kind "
                "AND status IN ('queued', 'running') LIMIT :at_most) open"
            ),
            {"user_id": user_id, "kind": kind, "at_most": at_most},
        ).scalar_one()
    )


def idle_open_jobs(session: Session, kind: str, *, older_than_seconds: int) -> list[dict[str, Any]]:
    """Open jobs of one kind with no pending chunk and no progress for a while: a step's message was lost."""
    rows = session.execute(
        text(
            f"""
            SELECT {JOB_COLUMNS} FROM jobs j
            WHERE kind = :kind AND status IN ('queued', 'running')
              AND updated_at < now() - make_interval(secs => :age)
              AND NOT EXISTS (SELECT 1 FROM job_chunks c WHERE c.job_id = j.id AND c.status = 'pending')
            FOR UPDATE SKIP LOCKED
            """
        ),
        {"kind": kind, "age": older_than_seconds},
    ).all()
    return [dict(r._mapping) for r in rows]


def touch_job(session: Session, job_id: uuid.UUID) -> None:
    """The sweeper re-sent the job's next step: its stall clock restarts and an expired lease is cleared."""
    session.execute(
        text(
            "UPDATE jobs SET updated_at = now(), lease_owner = NULL, lease_until = NULL "
            "WHERE id = :id AND (lease_until IS NULL OR lease_until < now())"
        ),
        {"id": job_id},
    )


def chunk_totals(session: Session, job_id: uuid.UUID) -> dict[str, int]:
    """Sum of the integer counters every finished chunk reported (created, duplicates, ...)."""
    rows = session.execute(
        text(
            "SELECT key, sum(value::bigint) AS total FROM job_chunks, jsonb_each_text(result) "
            "WHERE job_id = :id AND result IS NOT NULL AND jsonb_typeof(result -> key) = 'number' GROUP BY key"
        ),
        {"id": job_id},
    ).all()
    return {r.key: int(r.total) for r in rows}


def chunk_pairs(session: Session, job_id: uuid.UUID, key: str, limit: int) -> tuple[list[list[Any]], int]:
    """The [item index, ...] lists every finished chunk reported under `key`, by index, at most `limit`; and how
    many there are in all."""
    rows = session.execute(
        text(
            "SELECT e AS pair, count(*) OVER () AS total FROM job_chunks c, jsonb_array_elements(c.result -> :key) e "
            "WHERE c.job_id = :id AND jsonb_typeof(c.result -> :key) = 'array' "
            "ORDER BY CAST(e ->> 0 AS integer) LIMIT :limit"
        ),
        {"id": job_id, "key": key, "limit": limit},
    ).all()
    return [r.pair for r in rows], (rows[0].total if rows else 0)


def merge_result(session: Session, job_id: uuid.UUID, patch: dict[str, Any], *, error: str | None = None) -> None:
    """Merge `patch` into a job's result (its phase, stage timings); `error` records a failed attempt."""
    session.execute(
        text(
            "UPDATE jobs SET result = result || CAST(:patch AS jsonb), error = COALESCE(:error, error), "
            "updated_at = now() WHERE id = :id"
        ),
        {"id": job_id, "patch": json.dumps(patch), "error": error[:4000] if error else None},
    )


def sequence_of(session: Session, job_id: uuid.UUID) -> list[uuid.UUID]:
    """The memories a `sequence` batch's items became, in the items' order (each chunk's result lists its
    items' positions, memories and whether the memory is new). A memory the batch did not create ("Thanks!"
    said again, already stored) stays out of the order: linked, it would become a hub that every sequence
    it recurs in runs through; a memory the batch says twice keeps its first place."""
    rows = session.execute(
        text(
            """
            WITH items AS (
                SELECT CAST(e->>0 AS integer) AS pos, CAST(e->>1 AS uuid) AS memory_id,
                       CAST(e->>2 AS boolean) AS created
                FROM job_chunks c, jsonb_array_elements(c.result->'sequence') AS e
                WHERE c.job_id = :id
            )
            SELECT memory_id, min(pos) AS pos FROM items
            WHERE memory_id IN (SELECT memory_id FROM items WHERE created)
            GROUP BY memory_id
            ORDER BY pos
            """
        ),
        {"id": job_id},
    ).all()
    return [r.memory_id for r in rows]
