"""`POST /memory/batch` as a use case: a batch found again by its idempotency key, or planned and written as a job
and its chunks (`batches.plan_batch` plans; the workers store the chunks, `chunks.py`). The caller sends the chunks'
messages after its commit and charges the tenant's quota through `charge`."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from sqlalchemy.orm import Session

from shared.api.memories import BatchRequest
from shared.backpressure import specs_cost
from shared.config import Settings
from shared.jobs import ChunkSpec, JobKind, StoreChunk
from shared.memory.batches import plan_batch
from shared.storage import backlog, job_lookups
from shared.storage import jobs as job_store


@dataclass(frozen=True)
class Submitted:
    """A batch's job; `chunks` None when it was made before (the same batch sent again), else what this call wrote,
    with the messages that send them."""

    job_id: uuid.UUID
    chunks: list[ChunkSpec] | None
    messages: tuple[StoreChunk, ...] = ()


def existing_batch(session: Session, user_id: str, body: BatchRequest) -> uuid.UUID | None:
    """The job a batch with this idempotency key already made (None: none, or no key); Conflict when the key was
    used for another request."""
    if not body.idempotency_key:
        return None
    return job_lookups.idempotent_job(
        session,
        user_id=user_id,
        kind=JobKind.BATCH,
        idempotency_key=body.idempotency_key,
        request_hash=body.request_hash(),
    )


def submit_batch(
    session: Session,
    user_id: str,
    body: BatchRequest,
    *,
    settings: Settings,
    tokens_of: Callable[[list[str]], Sequence[int]],
    charge: Callable[[Sequence[int]], None],
    reading: Callable[[], AbstractContextManager[Session]] | None = None,
) -> Submitted:
    """The batch's job: found by its idempotency key on a `reading` session (without planning or charging it again),
    else planned and written on `session` with its chunks. `tokens_of`: the items' tokens for the embedding model.
    `charge(tokens)` is called once the job is made by this call, before its chunks are written: a refusal (429)
    there rolls the job back, and an identical batch sent meanwhile costs nothing."""
    if body.idempotency_key and reading is not None:
        with reading() as looking:
            existing = existing_batch(looking, user_id, body)
        if existing is not None:
            return Submitted(existing, None)
    tokens = tokens_of([item.content for item in body.items])
    chunks = plan_batch(
        body, limits=settings.limits, context=settings.context, chunk_size=settings.chunk_size, tokens=tokens
    )
    job_id, created = job_store.create_job(
        session,
        user_id=user_id,
        kind=JobKind.BATCH,
        total=len(body.items),
        params={"items": len(body.items), "chunks": len(chunks), "sequence": body.sequence},
        idempotency_key=body.idempotency_key,
        request_hash=body.request_hash() if body.idempotency_key else None,
        wait_ms=settings.database_limits.gateway.statement_ms or None,
    )
    if not created:
        return Submitted(job_id, None)
    charge(tokens)
    priority = backlog.priority_of(session, user_id, specs_cost(chunks), fair=settings.fair_queues)
    job_store.add_chunks(session, job_id, chunks, priority=priority)
    messages = tuple(
        StoreChunk(job_id=job_id, seq=c.seq, sector=c.sector, user_id=user_id, priority=priority) for c in chunks
    )
    return Submitted(job_id, chunks, messages)
