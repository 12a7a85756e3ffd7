"""SQL over decay_runs: a cycle's row, its plan and cursors, its counts, and the interrupted run it resumes."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from shared.storage import locks
from shared.storage.decay_steps import StepResult
from shared.storage.locks import Lock

RUN_COLUMNS = (
    "id, trigger, status, ratio, reason, plan, processed, changed, hot, warm, cold, compressed, fingerprinted, "
    "segments, duration_ms, resumed_by, created_at, started_at, finished_at"
)


def create_run(session: Session, *, trigger: str, ratio: float, run_id: uuid.UUID | None = None) -> uuid.UUID:
    """A queued run; with `run_id`, the run of that id, created only if it does not exist yet (a redelivered
    scheduled message names the run its first delivery made)."""
    run_id = run_id or uuid.uuid4()
    session.execute(
        text("INSERT INTO decay_runs (id, trigger, ratio) VALUES (:id, :t, :r) ON CONFLICT (id) DO NOTHING"),
        {"id": run_id, "t": trigger, "r": ratio},
    )
    return run_id


def get_run(session: Session, run_id: uuid.UUID) -> dict[str, Any] | None:
    row = session.execute(text(f"SELECT {RUN_COLUMNS} FROM decay_runs WHERE id = :id"), {"id": run_id}).first()
    return dict(row._mapping) if row else None


def recent_runs(session: Session, limit: int) -> list[dict[str, Any]]:
    rows = session.execute(
        text(f"SELECT {RUN_COLUMNS} FROM decay_runs ORDER BY created_at DESC LIMIT :n"), {"n": limit}
    ).all()
    return [dict(r._mapping) for r in rows]


def interrupted_run(session: Session) -> dict[str, Any] | None:
    """A run left `running` by a process that died (call while holding the cycle lock: nobody else runs)."""
    row = session.execute(
        text(f"SELECT {RUN_COLUMNS} FROM decay_runs WHERE status = 'running' ORDER BY started_at LIMIT 1")
    ).first()
    return dict(row._mapping) if row else None


def seconds_since_last_run(session: Session, now: datetime) -> float | None:
    value = session.execute(
        text(
            "SELECT extract(epoch FROM (CAST(:now AS timestamptz) - max(finished_at))) FROM decay_runs "
            "WHERE status = 'succeeded'"
        ),
        {"now": now},
    ).scalar_one()
    return None if value is None else float(value)


def start_run(session: Session, run_id: uuid.UUID, plan: list[dict[str, Any]]) -> bool:
    """Claim a queued run (or resume an interrupted one: call holding the cycle lock) with its plan; False when
    the run has ended meanwhile, which leaves it as it is."""
    row = session.execute(
        text(
            "UPDATE decay_runs SET status = 'running', started_at = COALESCE(started_at, now()), "
            "plan = CAST(:plan AS jsonb), segments = :n WHERE id = :id AND status IN ('queued', 'running') "
            "RETURNING id"
        ),
        {"id": run_id, "plan": _json(plan), "n": len(plan)},
    ).first()
    return row is not None


def record_step(
    session: Session,
    run_id: uuid.UUID,
    segment: int,
    cursor: dict[str, Any],
    step: StepResult,
    *,
    compressed: int,
    fingerprinted: int,
) -> None:
    """Add a step's counts and move its segment's cursor — in the step's own transaction, so a crash either
    keeps both the decayed rows and the cursor past them, or neither."""
    session.execute(
        text(
            """
            UPDATE decay_runs SET
                plan = jsonb_set(plan, ARRAY[CAST(:segment AS text)], plan -> :segment || CAST(:cursor AS jsonb)),
                processed = processed + :processed, changed = changed + :changed,
                hot = hot + :hot, warm = warm + :warm, cold = cold + :cold,
                compressed = compressed + :compressed, fingerprinted = fingerprinted + :fingerprinted
            WHERE id = :id
            """
        ),
        {
            "id": run_id,
            "segment": segment,
            "cursor": _json(cursor),
            "processed": step.processed,
            "changed": step.changed,
            **step.tiers,
            "compressed": compressed,
            "fingerprinted": fingerprinted,
        },
    )


def finish_run(
    session: Session, run_id: uuid.UUID, *, status: str, reason: str | None = None, duration_ms: float | None = None
) -> dict[str, Any]:
    row = session.execute(
        text(
            f"""
            UPDATE decay_runs SET status = :status, reason = COALESCE(:reason, reason),
                   duration_ms = COALESCE(:ms, duration_ms), finished_at = now()
            WHERE id = :id RETURNING {RUN_COLUMNS}
            """
        ),
        {"id": run_id, "status": status, "reason": reason, "ms": duration_ms},
    ).one()
    return dict(row._mapping)


def mark_resumed(session: Session, old: uuid.UUID, new: uuid.UUID) -> None:
    """The new run finishes the interrupted one's plan (instead of a plan of its own); both rows say so."""
    session.execute(
        text("UPDATE decay_runs SET reason = 'finished the plan of interrupted run ' || :old WHERE id = :new"),
        {"old": str(old), "new": new},
    )
    session.execute(
        text(
            "UPDATE decay_runs SET status = 'failed', reason = 'interrupted; finished by run ' || :new, "
            "resumed_by = CAST(:new AS uuid), finished_at = now() WHERE id = :old"
        ),
        {"old": old, "new": str(new)},
    )


def _json(value: Any) -> str:
    return json.dumps(value, default=str)


def carry_counts(session: Session, old: uuid.UUID, new: uuid.UUID) -> None:
    """A resuming run starts from the counts the interrupted one had committed."""
    session.execute(
        text(
            """
            UPDATE decay_runs n SET processed = o.processed, changed = o.changed, hot = o.hot, warm = o.warm,
                   cold = o.cold, compressed = o.compressed, fingerprinted = o.fingerprinted
            FROM decay_runs o WHERE o.id = :old AND n.id = :new
            """
        ),
        {"old": old, "new": new},
    )


def finish_segment(session: Session, run_id: uuid.UUID, segment: int) -> None:
    session.execute(
        text(
            "UPDATE decay_runs SET plan = jsonb_set(plan, ARRAY[CAST(:segment AS text), 'finished'], 'true') "
            "WHERE id = :id"
        ),
        {"id": run_id, "segment": segment},
    )


def orphaned_runs(session: Session) -> list[dict[str, Any]]:
    """Runs left `running` while nobody holds the cycle lock: the process running them died. Sent again, each
    resumes its own plan from its last committed step."""
    if locks.is_held(session, Lock.DECAY_CYCLE):
        return []
    rows = session.execute(
        text(f"SELECT {RUN_COLUMNS} FROM decay_runs WHERE status = 'running' ORDER BY started_at LIMIT 10")
    ).all()
    return [dict(r._mapping) for r in rows]


def queued_runs(session: Session, *, older_than_seconds: float) -> list[dict[str, Any]]:
    """Operators' runs still queued after this long: their message was lost (the broker was down when the
    gateway sent it), or the maintenance queue is that far behind (a second message then finds the run done)."""
    rows = session.execute(
        text(
            f"SELECT {RUN_COLUMNS} FROM decay_runs WHERE status = 'queued' AND trigger = 'operator' "
            "AND created_at < now() - make_interval(secs => :age) ORDER BY created_at LIMIT 100"
        ),
        {"age": older_than_seconds},
    ).all()
    return [dict(r._mapping) for r in rows]


def skip_run(session: Session, run_id: uuid.UUID, reason: str) -> dict[str, Any]:
    """Mark a run that has not started skipped; a run another delivery is running (or has finished) stays as
    it is. Returns the run's row."""
    row = session.execute(
        text(
            f"UPDATE decay_runs SET status = 'skipped', reason = :reason, finished_at = now() "
            f"WHERE id = :id AND status = 'queued' RETURNING {RUN_COLUMNS}"
        ),
        {"id": run_id, "reason": reason},
    ).first()
    if row is not None:
        return dict(row._mapping)
    current = get_run(session, run_id)
    assert current is not None
    return current
