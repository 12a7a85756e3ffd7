"""Storing one chunk of an import (the embed workers' half): memories as they were exported, or, once every memory
of the job is stored, its waypoints (docs/data.md#importing).

A memory keeps its id, unless the store holds that id for another tenant (then it gets its alias, the same every
time: `import_plan.alias`), or the job re-keys (an import under a tenant's key: every new memory gets its alias, so
a fresh id and another tenant's look the same to the importer); a memory the tenant already has (that id, its alias,
or the same content) is left as it is and stands for the file's. Its vectors are used when the store's model of the
sector is the one that made them (and they have the width its compression says); otherwise it is embedded again, at
full width. Nothing new is linked: the waypoints are the file's. A chunk is one transaction, and stores nothing if
its job was cancelled.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from shared.api.data import ExportedMemory, ExportedWaypoint
from shared.data.import_plan import alias
from shared.data.lines import decode_vector
from shared.jobs import JobKind
from shared.lifecycle.compression import fingerprint_summary, fingerprint_vector
from shared.memory.chunks import JobCancelled
from shared.memory.engine import MemoryEngine
from shared.model.statuses import JobStatus
from shared.storage import bm25, cancels, transfer
from shared.storage import embed_logs as embed_log_store
from shared.storage import jobs as job_store
from shared.storage.rows import SectorVector
from shared.storage.sector_models import guard_store_model
from shared.storage.vectors import copy_vectors
from shared.text import hash_normalized, normalize_content


@dataclass
class ChunkOutcome:
    """The job's status after the chunk, and the held chunks it released (to send after commit)."""

    status: str
    release: list[tuple[int, str]] = field(default_factory=list)


def store_chunk(
    engine: MemoryEngine, session: Session, job_id: uuid.UUID, seq: int, owner: str | None = None
) -> ChunkOutcome | None:
    """Store one chunk of an import job (`owner`: this worker's lease on it); None when there was nothing to do."""
    chunk = job_store.lock_chunk(session, job_id, seq, owner)
    if chunk is None:
        return None
    job = job_store.get_job(session, job_id)
    assert job is not None
    if job["status"] == JobStatus.CANCELLED:
        cancels.cancel_chunk(session, job_id, seq)
        return ChunkOutcome(JobStatus.CANCELLED)
    items: list[dict[str, Any]] = chunk["items"]
    links = bool(items) and items[0].get("type") == "waypoint"
    try:
        with session.begin_nested():  # all of the chunk, or (its job cancelled meanwhile) none of it
            if links:
                result = _store_links(session, job, [ExportedWaypoint.model_validate(i) for i in items])
            else:
                result = _store_memories(engine, session, job, [ExportedMemory.model_validate(i) for i in items])
            status = job_store.complete_chunk(session, job_id, seq, done=len(items), result=result)
            if status == JobStatus.CANCELLED:
                raise JobCancelled(job_id)
            # complete_chunk holds the job row: the chunk that completes the last memory chunk releases the links
            done = transfer.open_unheld_chunks(session, job_id) == 0
            release = transfer.release_held_chunks(session, job_id) if done else []
    except JobCancelled:
        cancels.cancel_chunk(session, job_id, seq)
        return ChunkOutcome(JobStatus.CANCELLED)
    return ChunkOutcome(status, release)


@dataclass
class _Placed:
    line: ExportedMemory
    target: uuid.UUID
    content_hash: str
    new: bool


def _place(session: Session, tenant: str, memories: list[ExportedMemory]) -> list[_Placed]:
    """Where each memory of the file goes: a memory the tenant has (its id, its alias, its content), else new."""
    hashes = [hash_normalized(normalize_content(m.content)) for m in memories]
    ids = [m.id for m in memories] + [alias(tenant, m.id) for m in memories]
    have_ids, have_hashes = transfer.known_memories(session, tenant, ids, hashes)
    placed: list[_Placed] = []
    first: dict[str, uuid.UUID] = {}  # the same content twice in the chunk: the first stands for both
    for memory, content_hash in zip(memories, hashes, strict=True):
        known = next((i for i in (memory.id, alias(tenant, memory.id)) if i in have_ids), None)
        known = known or have_hashes.get(content_hash) or first.get(content_hash)
        placed.append(_Placed(memory, known or memory.id, content_hash, known is None))
        first.setdefault(content_hash, known or memory.id)
    return placed


def _vectors(engine: MemoryEngine, memory: ExportedMemory) -> dict[str, SectorVector] | None:
    """The memory's exported vectors where the store's models made them (one decoded array per exported vector,
    shared by its sectors); None when any sector's must be embedded again."""
    out: dict[str, SectorVector] = {}
    decoded: dict[int, SectorVector] = {}
    for sector in memory.sectors:
        vector, provider = memory.vector_of(sector), engine.embedders[sector]
        width = memory.vector_dim if memory.compression == "compressed" else provider.dim
        if vector is None or vector.model != provider.model or vector.dim != width:
            return None
        out[sector] = decoded.setdefault(id(vector), SectorVector(provider.model, decode_vector(vector.data)))
    return out


def _row(memory: ExportedMemory, content_hash: str, document_id: str | None) -> dict[str, Any]:
    row = memory.model_dump(mode="json", exclude={"type", "metadata", "vectors", "indexed"})
    return row | {"content_hash": content_hash, "meta": memory.metadata, "document_id": document_id}


def _store_memories(
    engine: MemoryEngine, session: Session, job: dict[str, Any], memories: list[ExportedMemory]
) -> dict[str, Any]:
    tenant = job["user_id"]
    placed = _place(session, tenant, memories)
    fresh = [p for p in placed if p.new]
    documents = job["params"].get("document_ids") or {}  # the file's document ids stored under another one

    def stored_document(memory: ExportedMemory) -> str | None:
        return documents.get(str(memory.document_id), str(memory.document_id)) if memory.document_id else None

    wanted = {d for d in (stored_document(p.line) for p in fresh) if d}
    ours = {str(i) for i in transfer.tenant_documents(session, tenant, [uuid.UUID(d) for d in wanted])}
    vectors: dict[uuid.UUID, dict[str, SectorVector]] = {}
    again = []
    for p in fresh:
        if p.line.compression == "fingerprinted":  # no vector to carry or make: a fingerprint (made below)
            continue
        carried = _vectors(engine, p.line)
        if carried is None:
            again.append(p)
        else:
            vectors[p.line.id] = carried
    if again:  # another model made them (or they were not exported): embedded now, at full width
        made, calls = engine.embed_by_sector(
            [normalize_content(p.line.content) for p in again], [p.line.sectors for p in again]
        )
        for call in calls:
            embed_log_store.log_embedding(session, call, purpose=JobKind.IMPORT, job_id=job["id"])
        vectors |= {p.line.id: v for p, v in zip(again, made, strict=True)}
    full_again = {p.line.id for p in again}
    rows = {}
    for p in fresh:
        document = stored_document(p.line)
        rows[p.line.id] = _row(p.line, p.content_hash, document if document in ours else None)
        if p.line.id in full_again:
            rows[p.line.id] |= {"compression": "full", "vector_dim": None, "summary": None}
    guard_store_model(session, engine.embedders)
    rekey = bool(job["params"].get("rekey"))
    stored = _insert(session, tenant, fresh, rows, engine.settings.compression.fingerprint_dim, rekey=rekey)
    final = {p.line.id: p.target for p in fresh}
    for p in placed:  # a repeat of a new memory of this chunk follows it to the id it got
        if not p.new and p.target in final:
            p.target = final[p.target]
    inserted = [p for p in fresh if p.line.id in stored]
    for indexed in (True, False):
        group = [
            (p.target, tenant, vectors[p.line.id])
            for p in inserted
            if p.line.indexed is indexed and p.line.id in vectors
        ]
        if group:
            copy_vectors(session, group, indexed=indexed)
    # every memory counts in BM25 from when it is stored, settled or waiting for its merge
    bm25.count_terms(session, [p.target for p in inserted], sign=1)
    remapped = {str(p.line.id): str(p.target) for p in placed if p.line.id != p.target}
    return {
        "created": len(inserted),
        "existing": len(memories) - len(inserted),
        "reembedded": len(again),
        "remapped": remapped,
    }


def _insert(
    session: Session,
    tenant: str,
    fresh: list[_Placed],
    rows: dict[uuid.UUID, dict[str, Any]],
    fingerprint_dim: int,
    *,
    rekey: bool = False,
) -> set[uuid.UUID]:
    """Insert the new memories, under their own id, else (another tenant's, or `rekey`) their alias; sets each
    one's target, and returns the file ids of those inserted. One that could not be inserted either way was written
    meanwhile (its content, by an add of the tenant): that memory stands for it."""
    stored: set[uuid.UUID] = set()
    pending = list(fresh)
    for use_alias in (True,) if rekey else (False, True):
        if not pending:
            break
        batch = []
        for p in pending:
            p.target = alias(tenant, p.line.id) if use_alias else p.line.id
            row = rows[p.line.id] | {"id": str(p.target)}
            if p.line.compression == "fingerprinted":  # the fingerprint hashes the id: made for the id it gets
                summary = p.line.summary or fingerprint_summary(p.line.content)
                fingerprint = fingerprint_vector(str(p.target), summary, fingerprint_dim)
                row |= {"summary": summary, "fingerprint": _vector_text(fingerprint)}
            batch.append(row)
        inserted = transfer.insert_memories(session, tenant, batch)
        stored |= {p.line.id for p in pending if p.target in inserted}
        left = [p for p in pending if p.line.id not in stored]
        _, by_hash = transfer.known_memories(session, tenant, [], [p.content_hash for p in left])
        for p in left:
            if p.content_hash in by_hash:
                p.target, p.new = by_hash[p.content_hash], False
        pending = [p for p in left if p.new]
    if pending:
        raise RuntimeError(f"{len(pending)} memories could be stored neither under their id nor under their alias")
    return stored


def _vector_text(vector: np.ndarray) -> str:
    """As the decay cycle writes a fingerprint (storage.decay_steps): the same memory, the same stored value."""
    return "[" + ",".join(f"{x:.7g}" for x in vector.tolist()) + "]"


def _store_links(session: Session, job: dict[str, Any], waypoints: list[ExportedWaypoint]) -> dict[str, Any]:
    """The file's waypoints between the memories its chunks stored (by the ids they got)."""
    ends = sorted({str(i) for w in waypoints for i in (w.src_id, w.dst_id)})
    remapped = transfer.remapped_ids(session, job["id"], ends)
    rows = [
        w.model_dump(mode="json", exclude={"type"})
        | {"src_id": remapped.get(str(w.src_id), str(w.src_id)), "dst_id": remapped.get(str(w.dst_id), str(w.dst_id))}
        for w in waypoints
    ]
    linked = transfer.insert_waypoints(session, job["user_id"], rows)
    return {"links": linked, "links_kept": len(rows) - linked}
