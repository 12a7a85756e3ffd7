"""Finding a tenant's jobs by what they are for: the one an idempotency key made, an import still running."""

from __future__ import annotations

import uuid

from sqlalchemy import text
from sqlalchemy.orm import Session

from shared.errors import Conflict


def unfinished_job(session: Session, user_id: str, kind: str) -> uuid.UUID | None:
    """A job of the tenant of this kind that has not ended (queued or running), if any."""
    return session.execute(
        text(
            "SELECT id FROM jobs WHERE user_id = :u AND kind = :k AND status NOT IN ('succeeded', 'failed', "
            "'cancelled') ORDER BY created_at LIMIT 1"
        ),
        {"u": user_id, "k": kind},
    ).scalar_one_or_none()


def idempotent_job(
    session: Session, *, user_id: str, kind: str, idempotency_key: str | None, request_hash: str | None
) -> uuid.UUID | None:
    """The job made for this idempotency key, None when there is none (committed); Conflict when it was made for
    another request."""
    existing = session.execute(
        text("SELECT id, request_hash FROM jobs WHERE user_id = :u AND kind = :k AND idempotency_key = :key"),
        {"u": user_id, "k": kind, "key": idempotency_key},
    ).first()
    if existing is None:
        return None
    if request_hash is not None and existing.request_hash is not None and existing.request_hash != request_hash:
        raise Conflict(
            f"idempotency_key {idempotency_key!r} was already used for another request (job {existing.id}): send "
            "that same request again to get its job, or a new key for a new request",
            details={"idempotency_key": idempotency_key, "job_id": str(existing.id)},
        )
    return existing.id
