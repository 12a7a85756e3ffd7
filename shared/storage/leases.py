"""Leases on work: a worker claims a chunk or a job's own step for a while, and the claim is the attempt.

A message only asks for work; the lease says who is doing it. A claim succeeds when the work is open and its
lease is free or expired, counts one attempt, and holds the lease for `ttl` seconds. A duplicate message (the
sweeper's, a redelivery after the visibility timeout, the same message published twice) finds the lease held
and leaves, counting nothing, so a backlog can never use up a healthy job's attempts.

Chunks are worked on inside one transaction that locks their row (`jobs.lock_chunk`), so a live worker is
visible to the sweeper as that row lock; the lease only has to cover the moment between the claim and the lock.
A job's own step (a document's extraction, which may take half an hour) holds no lock meanwhile, so its worker
renews the lease from a `Heartbeat` thread. When a worker dies, its lock goes with its connection and its lease
stops being renewed: the sweeper re-sends the work as soon as the lease has run out.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from shared.db import Database
from shared.storage.jobs import JOB_COLUMNS, ChunkRef

log = logging.getLogger("mnemoflow.jobs")


def owner_token() -> str:
    """Who holds a lease: host, process and a per-claim suffix (shown in the job row for operators)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class ChunkClaim:
    """What a claim on a chunk found: the attempt it counted, or why there is none."""

    attempts: int | None = None  # claimed: this attempt's number
    # Not claimed, though the chunk is pending and no transaction holds it: a lease taken a moment ago by a
    # worker about to lock it, or by one that died (a pool process killed mid-chunk, its message redelivered at
    # once). Either way the answer is known when the lease runs out, in this many seconds.
    lease_left: float | None = None


def claim_chunk(session: Session, job_id: uuid.UUID, seq: int, *, owner: str, ttl: float) -> ChunkClaim:
    """Claim a pending chunk and count the attempt. Nothing is claimed when the chunk is done or failed, when a
    worker's transaction has its row (without waiting for it), or while another worker's lease is live."""
    row = session.execute(
        text(
            """
            WITH target AS (
                SELECT job_id, seq, status, lease_until FROM job_chunks
                WHERE job_id = :job_id AND seq = :seq
                FOR UPDATE SKIP LOCKED
            ), claimed AS (
                UPDATE job_chunks c SET attempts = c.attempts + 1, lease_owner = :owner,
                       lease_until = now() + make_interval(secs => :ttl)
                FROM target t
                WHERE c.job_id = t.job_id AND c.seq = t.seq AND t.status = 'pending'
                  AND (t.lease_until IS NULL OR t.lease_until < now())
                RETURNING c.attempts
            )
            SELECT (SELECT attempts FROM claimed) AS attempts,
                   (SELECT extract(epoch FROM t.lease_until - now()) FROM target t
                    WHERE t.status = 'pending' AND t.lease_until >= now()) AS lease_left
            """
        ),
        {"job_id": job_id, "seq": seq, "owner": owner, "ttl": ttl},
    ).one()
    if row.attempts is None:
        return ChunkClaim(lease_left=None if row.lease_left is None else float(row.lease_left))
    session.execute(
        text(
            "UPDATE jobs SET status = 'running', started_at = COALESCE(started_at, now()), updated_at = now(), "
            "attempts = GREATEST(attempts, :attempts) WHERE id = :id AND status IN ('queued', 'running')"
        ),
        {"id": job_id, "attempts": row.attempts},
    )
    return ChunkClaim(attempts=int(row.attempts))


def claim_job(session: Session, job_id: uuid.UUID, *, owner: str, ttl: float) -> int | None:
    """Claim an open job's own step (not a chunk's) and count the attempt; None when the job is closed or
    another worker's lease on it is live."""
    claimed = claim_jobs(session, [job_id], owner=owner, ttl=ttl)
    return int(claimed[0]["attempts"]) if claimed else None


def claim_jobs(
    session: Session, job_ids: Sequence[uuid.UUID], *, owner: str, ttl: float, result: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """`claim_job` for several jobs in one statement, and `result` (if given) merged into each one's with its
    `attempt`: the jobs claimed, as `jobs.get_job` reads them (those closed or held by another live lease are left
    out)."""
    if not job_ids:
        return []
    merged = "result || CAST(:result AS jsonb) || jsonb_build_object('attempt', attempts + 1)"
    rows = session.execute(
        text(
            f"""
            UPDATE jobs SET attempts = attempts + 1, status = 'running', started_at = COALESCE(started_at, now()),
                   updated_at = now(), lease_owner = :owner, lease_until = now() + make_interval(secs => :ttl),
                   result = {merged if result is not None else "result"}
            WHERE id = ANY(CAST(:ids AS uuid[])) AND status IN ('queued', 'running')
              AND (lease_until IS NULL OR lease_until < now())
            RETURNING {JOB_COLUMNS}
            """
        ),
        {"ids": list(job_ids), "owner": owner, "ttl": ttl, "result": json.dumps(result or {})},
    ).all()
    return [dict(r._mapping) for r in rows]


def renew_job(session: Session, job_id: uuid.UUID, *, owner: str, ttl: float) -> bool:
    """Extend a job lease this owner still holds; False when it holds it no more."""
    row = session.execute(
        text(
            "UPDATE jobs SET lease_until = now() + make_interval(secs => :ttl) "
            "WHERE id = :id AND lease_owner = :owner RETURNING id"
        ),
        {"id": job_id, "owner": owner, "ttl": ttl},
    ).first()
    return row is not None


def release_job(session: Session, job_id: uuid.UUID, *, owner: str) -> None:
    """Give a job lease back (the step ended, whatever its outcome)."""
    session.execute(
        text("UPDATE jobs SET lease_owner = NULL, lease_until = NULL WHERE id = :id AND lease_owner = :owner"),
        {"id": job_id, "owner": owner},
    )


class Heartbeat:
    """Renews a job lease every third of its ttl from a daemon thread while a long step runs.

    `with Heartbeat(db, job_id, owner, ttl):` — the lease is released when the block ends. A renewal that fails
    (the database is away) is logged and tried again at the next beat; if the lease runs out meanwhile, the
    sweeper may start the step elsewhere, which the step's own idempotence makes harmless.
    """

    def __init__(self, db: Database, job_id: uuid.UUID, owner: str, ttl: float) -> None:
        self.db = db
        self.job_id = job_id
        self.owner = owner
        self.ttl = ttl
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"lease-{job_id}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            with self.db.session() as session:
                release_job(session, self.job_id, owner=self.owner)
        except Exception as error:  # the lease runs out by itself
            log.warning("could not release the lease on job %s: %s", self.job_id, error)

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                with self.db.session() as session:
                    if not renew_job(session, self.job_id, owner=self.owner, ttl=self.ttl):
                        log.warning("job %s: lease lost (%s); the step continues, idempotent", self.job_id, self.owner)
                        return
            except Exception as error:
                log.warning("job %s: could not renew the lease: %s", self.job_id, error)


def stalled_chunks(session: Session, *, older_than_seconds: int, limit: int = 1000) -> list[ChunkRef]:
    """Pending chunks to send again: claimed by a worker that died (its lease ran out, and no transaction holds
    the row), or never claimed `older_than_seconds` after they were sent (their message was lost; if it was only
    slow, the duplicate finds the chunk claimed or done and leaves, counting nothing)."""
    rows = session.execute(
        text(
            """
            SELECT c.job_id, c.seq, c.sector, c.priority, kind, user_id FROM job_chunks c JOIN jobs j ON j.id = c.job_id
            WHERE c.status = 'pending' AND j.status <> 'cancelled'
              AND (c.lease_until < now()
                   OR (c.lease_until IS NULL AND c.enqueued_at < now() - make_interval(secs => :age)))
            ORDER BY c.enqueued_at
            LIMIT :limit
            FOR UPDATE OF c SKIP LOCKED
            """
        ),
        {"age": older_than_seconds, "limit": limit},
    ).all()
    return [ChunkRef(r.job_id, r.seq, r.sector, r.kind, r.user_id, r.priority) for r in rows]


def mark_enqueued(session: Session, chunks: Sequence[ChunkRef]) -> None:
    if not chunks:
        return
    session.execute(
        text(
            "UPDATE job_chunks c SET enqueued_at = now(), lease_owner = NULL, lease_until = NULL "
            "FROM unnest(CAST(:ids AS uuid[]), CAST(:seqs AS int[])) "
            "AS k(job_id, seq) WHERE c.job_id = k.job_id AND c.seq = k.seq"
        ),
        {"ids": [str(c.job_id) for c in chunks], "seqs": [c.seq for c in chunks]},
    )
