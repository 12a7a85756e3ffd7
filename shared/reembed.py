"""Re-embedding a store with another model: plan, per-chunk work on the sector queues, then the switch.

1. `start_job` records the target model; `plan_round` lists every memory with a vector of another
   model and splits them, per primary sector, into chunks on that sector's queue.
2. `process_chunk` re-embeds a chunk's memories from their original content and swaps their vectors,
   exactly once (the chunk's row lock), whichever worker gets it.
3. `finish` takes the store-model lock exclusively (in-flight writers drain, new ones wait), and
   switches the store to the target only when no vector of another model is left; if writers still
   running with the old model added some meanwhile, another planning round picks them up.
After the switch, writers configured with the old model are refused with a message saying what to
set; queries keep working on full text until the processes restart with the new provider.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import asdict
from typing import Any

from sqlalchemy.orm import Session

from shared.embedding import EmbeddingProvider
from shared.embedding.calls import embed_timed
from shared.errors import Conflict
from shared.storage import jobs as job_store
from shared.storage import reembed as reembed_store
from shared.storage.models import StoreModel, current_model, lock_for_switch, switch_model
from shared.text import normalize_content

SYSTEM_TENANT = "_system"  # store-wide jobs belong to no tenant
JOB_KIND = "reembed"
MAX_ROUNDS = 5


def target_of(job: dict[str, Any]) -> StoreModel:
    raw = job["params"]["target"]
    return StoreModel(raw["provider"], raw["model"], int(raw["dim"]))


def start_job(session: Session, target: StoreModel, *, chunk_size: int) -> uuid.UUID:
    """Create the job (planned by a task); refuse when one is running or there is nothing to convert."""
    running = job_store.open_jobs(session, JOB_KIND)
    if running:
        raise Conflict(
            f"a re-embed is already running (job {running[0]['id']}); follow it with GET /jobs/{running[0]['id']}",
            details={"job_id": str(running[0]["id"])},
        )
    current = current_model(session)
    stale = reembed_store.count_stale_vectors(session, model=target.model, dim=target.dim)
    if current == target and stale == 0:
        raise Conflict(f"the store already uses {target.provider} model {target.model!r}; nothing to re-embed")
    job_id, _ = job_store.create_job(
        session,
        user_id=SYSTEM_TENANT,
        kind=JOB_KIND,
        total=0,
        params={
            "target": asdict(target),
            "from": asdict(current) if current else None,
            "chunk_size": chunk_size,
            "round": 0,
        },
        idempotency_key=None,
    )
    return job_id


def plan_round(session: Session, job_id: uuid.UUID) -> list[job_store.ChunkSpec]:
    """Chunks for every memory still carrying another model's vectors (none when the job is not open)."""
    job = job_store.get_job(session, job_id)
    if job is None or job["status"] not in ("queued", "running"):
        return []
    target = target_of(job)
    stale = reembed_store.stale_memories(session, model=target.model, dim=target.dim)
    by_sector: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for memory_id, sector in stale:
        by_sector[sector].append({"id": str(memory_id)})
    size = int(job["params"]["chunk_size"])
    seq = job_store.next_seq(session, job_id)
    chunks = []
    for sector in sorted(by_sector):
        ids = by_sector[sector]
        for start in range(0, len(ids), size):
            chunks.append(job_store.ChunkSpec(seq, sector, ids[start : start + size]))
            seq += 1
    job_store.add_chunks(session, job_id, chunks)
    job_store.grow_job(session, job_id, more_total=len(stale), params={"round": int(job["params"]["round"]) + 1})
    return chunks


def process_chunk(session: Session, job_id: uuid.UUID, seq: int, embedder: EmbeddingProvider) -> bool | None:
    """Re-embed one chunk exactly once; None if there was nothing to do, else whether all the job's chunks are done."""
    chunk = job_store.claim_chunk(session, job_id, seq)
    if chunk is None:
        return None
    rows = reembed_store.fetch_for_reembed(session, [uuid.UUID(item["id"]) for item in chunk["items"]])
    if rows:
        vectors, call = embed_timed(embedder, [normalize_content(r.content) for r in rows])
        job_store.log_embedding(session, call, purpose=JOB_KIND, job_id=job_id)
        reembed_store.replace_vectors(session, rows, vectors, model=embedder.model)
    job_store.complete_chunk(
        session,
        job_id,
        seq,
        done=len(chunk["items"]),
        result={"reembedded": len(rows), "deleted_meanwhile": len(chunk["items"]) - len(rows)},
        finish_job=False,
    )
    return job_store.open_chunk_count(session, job_id) == 0


def finish(session: Session, job_id: uuid.UUID) -> str:
    """Switch the store to the target model if nothing is left: 'succeeded', 'replan', 'failed' or the job's status."""
    job = job_store.get_job(session, job_id)
    if job is None or job["status"] not in ("queued", "running"):
        return str(job["status"]) if job else "missing"
    if job_store.open_chunk_count(session, job_id):
        return "running"
    target = target_of(job)
    lock_for_switch(session)
    stale = reembed_store.count_stale_vectors(session, model=target.model, dim=target.dim)
    if stale:
        if int(job["params"]["round"]) >= MAX_ROUNDS:
            job_store.finish_job(
                session,
                job_id,
                status="failed",
                error=(
                    f"{stale} vectors of another model were still being written after {MAX_ROUNDS} rounds: stop the "
                    "processes that write with the old provider (or restart them with the new one), then run the "
                    "re-embed again; nothing is lost, converted memories stay converted"
                ),
            )
            return "failed"
        return "replan"
    previous = current_model(session)
    switch_model(session, target)
    job_store.finish_job(
        session,
        job_id,
        status="succeeded",
        result={
            "switched_to": asdict(target),
            "switched_from": asdict(previous) if previous else None,
            "restart_with": f"MNEMOFLOW_EMBEDDING_PROVIDER={target.provider}",
        },
    )
    return "succeeded"
