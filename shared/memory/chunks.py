"""Storing one chunk of a batch or ingest job (the embed workers' half), exactly once.

The chunk's row lock makes it exactly once whichever worker gets it: a redelivered or duplicate message finds
it done or held. The chunk that completes its job finishes it in the same transaction: a `sequence` batch's
reading-order links, or an ingest job's document (shared.ingest.completion). A chunk of a cancelled job stores
nothing: it looks before embedding, and its job's row decides at the end (shared.storage.cancels).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from shared.ingest.completion import finish_document
from shared.jobs import ChunkItem, JobKind
from shared.memory.engine import MemoryEngine
from shared.model.statuses import JobStatus
from shared.storage import cancels
from shared.storage import embed_logs as embed_log_store
from shared.storage import jobs as job_store
from shared.storage import waypoints as waypoint_store
from shared.storage.rows import NewMemory


class JobCancelled(Exception):
    """The chunk's job was cancelled while the chunk was being stored: what it stored is rolled back."""


def store_chunk(
    engine: MemoryEngine,
    session: Session,
    job_id: uuid.UUID,
    seq: int,
    owner: str | None = None,
    on_stored: Callable[[int, int], None] | None = None,
) -> str | None:
    """Process one chunk (`owner`: this worker's lease on it); returns the job's status afterwards, or None when
    there was nothing to do. `on_stored(created, duplicates)` hears how many of its items became new memories.

    Items made from a document become memories placed in it (document_id, chunk_index); their vectors land in
    the fresh tier, searched at once and merged into the index in the background.
    """
    began = time.perf_counter()
    chunk = job_store.lock_chunk(session, job_id, seq, owner)
    if chunk is None:
        return None
    job = job_store.get_job(session, job_id)
    assert job is not None
    if job["status"] == JobStatus.CANCELLED:  # cancelled since it was sent: store nothing, embed nothing
        cancels.cancel_chunk(session, job_id, seq)
        return JobStatus.CANCELLED
    items = [ChunkItem.model_validate(raw) for raw in chunk["items"]]
    classified = [(i.classified.sectors, i.classified.confidence) if i.classified else None for i in items]
    started = time.perf_counter()
    prepared, calls = engine.prepare(items, job["user_id"], classified, [i.context or "" for i in items])
    embedded = time.perf_counter()
    prepared = [
        dataclasses.replace(memory, document_id=i.placement.document_id, chunk_index=i.placement.chunk_index)
        if i.placement
        else memory
        for memory, i in zip(prepared, items, strict=True)
    ]
    for call in calls:
        embed_log_store.log_embedding(session, call, purpose=job["kind"], job_id=job_id)
    try:
        with session.begin_nested():  # all of the chunk, or (its job cancelled meanwhile) none of it
            status, created = _store(engine, session, job, seq, items, prepared, embedded - started, began)
    except JobCancelled:
        cancels.cancel_chunk(session, job_id, seq)
        return JobStatus.CANCELLED
    if on_stored is not None:  # only once the chunk stands: a cancelled one stored nothing
        on_stored(created, len(items) - created)
    return status


def _store(
    engine: MemoryEngine,
    session: Session,
    job: dict[str, Any],
    seq: int,
    items: list[ChunkItem],
    prepared: list[NewMemory],
    embed_seconds: float,
    began: float,
) -> tuple[str, int]:
    """Store the chunk's memories and complete it; (the job's status, memories created). JobCancelled when the
    job was cancelled before the chunk completed (the caller rolls the chunk back)."""
    job_id = job["id"]
    stored = time.perf_counter()
    refs = engine.store(session, prepared, settle=False)
    created = sum(1 for r in refs if r.created)
    result: dict[str, Any] = {"created": created, "duplicates": len(items) - created}
    # which batch items an earlier memory already held (the same text, or the same fact in other words), and which
    deduplicated = [[i.index, str(ref.id)] for i, ref in zip(items, refs, strict=True) if not ref.created]
    if deduplicated and items[0].index is not None:
        result["deduplicated"] = deduplicated
    sequence = bool(job["params"].get("sequence"))
    if sequence:  # where each item went, for the links made when the last chunk is done
        result["sequence"] = [[i.position, str(ref.id), ref.created] for i, ref in zip(items, refs, strict=True)]
    ingest = job["kind"] == JobKind.INGEST
    # the chunk's stage times (summed over its job's chunks by chunk_totals: a document's stages, a batch's split)
    result["embed_ms"] = round(embed_seconds * 1000)
    result["store_ms"] = round((time.perf_counter() - stored) * 1000)
    result["work_ms"] = round((time.perf_counter() - began) * 1000)
    status = job_store.complete_chunk(session, job_id, seq, done=len(items), result=result, finish_job=not ingest)
    if status == JobStatus.CANCELLED:
        raise JobCancelled(job_id)
    # complete_chunk holds the job row lock, so this count sees every chunk committed before ours.
    if ingest and job_store.open_chunk_count(session, job_id) == 0:
        status = finish_document(session, job_id)
    elif sequence and job_store.open_chunk_count(session, job_id) == 0:
        links = waypoint_store.link_in_order(session, job["user_id"], job_store.sequence_of(session, job_id))
        job_store.merge_result(session, job_id, {"next_links": links})
    return status, created
