"""Re-embedding a store with another model: plan, per-chunk work on the sector queues, then the switch.

1. `start_job` records the target model of each sector to convert (all five, or some in advanced
   mode); `plan_round` lists every memory with a vector of another model in those sectors and splits
   them, per primary sector, into chunks on that sector's queue.
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
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

from sqlalchemy.orm import Session

from shared.embedding import EmbeddingProvider
from shared.embedding.calls import embed_timed
from shared.errors import Conflict
from shared.jobs import ChunkSpec, JobKind, ReembedItem, plan_chunks
from shared.model.embedders import StoreModel
from shared.model.statuses import OPEN_JOB, JobStatus
from shared.storage import embed_logs as embed_log_store
from shared.storage import jobs as job_store
from shared.storage import reembed as reembed_store
from shared.storage.rows import SectorVector
from shared.storage.sector_models import current_models, lock_for_switch, switch_models
from shared.text import normalize_content

SYSTEM_TENANT = "_system"  # store-wide jobs belong to no tenant
MAX_ROUNDS = 5


def targets_of(job: dict[str, Any]) -> dict[str, StoreModel]:
    """Sector -> the model its vectors are converted to."""
    return {
        sector: StoreModel(raw["provider"], raw["model"], int(raw["dim"]))
        for sector, raw in job["params"]["targets"].items()
    }


def store_models(session: Session) -> dict[str, StoreModel]:
    """The model each sector's vectors are made by now."""
    return current_models(session)


def start_job(session: Session, targets: Mapping[str, StoreModel], *, chunk_size: int) -> uuid.UUID:
    """Create the job (planned by a task); refuse when one is running or there is nothing to convert."""
    running = job_store.open_jobs(session, JobKind.REEMBED)
    if running:
        raise Conflict(
            f"a re-embed is already running (job {running[0]['id']}); follow it with GET /jobs/{running[0]['id']}",
            details={"job_id": str(running[0]["id"])},
        )
    current = current_models(session)
    stale = reembed_store.count_stale_vectors(session, targets)
    if all(current.get(sector) == target for sector, target in targets.items()) and stale == 0:
        models = sorted({f"{t.provider} model {t.model!r}" for t in targets.values()})
        raise Conflict(f"the store already uses {', '.join(models)} there; nothing to re-embed")
    job_id, _ = job_store.create_job(
        session,
        user_id=SYSTEM_TENANT,
        kind=JobKind.REEMBED,
        total=0,
        params={
            "targets": {sector: asdict(t) for sector, t in targets.items()},
            "from": {sector: asdict(current[sector]) for sector in targets if sector in current},
            "chunk_size": chunk_size,
            "round": 0,
        },
        idempotency_key=None,
    )
    return job_id


def plan_round(session: Session, job_id: uuid.UUID) -> list[ChunkSpec]:
    """Chunks for every memory still carrying another model's vectors (none when the job is not open)."""
    job = job_store.get_job(session, job_id)
    if job is None or job["status"] not in OPEN_JOB:
        return []
    stale = reembed_store.stale_memories(session, targets_of(job))
    chunks = plan_chunks(
        ((sector, ReembedItem(id=memory_id).model_dump(mode="json")) for memory_id, sector in stale),
        size=int(job["params"]["chunk_size"]),
        first_seq=job_store.next_seq(session, job_id),
    )
    job_store.add_chunks(session, job_id, chunks)
    job_store.grow_job(session, job_id, more_total=len(stale), params={"round": int(job["params"]["round"]) + 1})
    return chunks


def process_chunk(
    session: Session,
    job_id: uuid.UUID,
    seq: int,
    embedder_for: Callable[[StoreModel], EmbeddingProvider],
    contexts_of: Callable[[str, list[uuid.UUID]], list[str]] | None = None,
    owner: str | None = None,
) -> bool | None:
    """Re-embed one chunk exactly once (`owner`: this worker's lease on it); None if there was nothing to do, else
    whether all the job's chunks are done.

    `embedder_for` builds (or reuses) the provider of a target model. `contexts_of(user_id, ids)`: what each
    memory follows in its sequence, so a memory embedded after its previous turns is again.
    """
    chunk = job_store.lock_chunk(session, job_id, seq, owner)
    if chunk is None:
        return None
    job = job_store.get_job(session, job_id)
    assert job is not None
    targets = targets_of(job)
    rows = reembed_store.fetch_for_reembed(session, [ReembedItem.model_validate(item).id for item in chunk["items"]])
    contexts = ["" for _ in rows]
    if contexts_of is not None:
        by_user: dict[str, list[int]] = defaultdict(list)
        for i, row in enumerate(rows):
            by_user[row.user_id].append(i)
        for user_id, indexes in by_user.items():
            for i, context in zip(indexes, contexts_of(user_id, [rows[i].id for i in indexes]), strict=True):
                contexts[i] = normalize_content(context)
    vectors: list[dict[str, SectorVector]] = [{} for _ in rows]
    by_target: dict[StoreModel, list[str]] = defaultdict(list)
    for sector, target in targets.items():
        by_target[target].append(sector)
    for target, sectors in by_target.items():  # one provider call per target model
        wanted = [i for i, row in enumerate(rows) if set(row.sectors) & set(sectors)]
        if not wanted:
            continue
        embedder = embedder_for(target)
        embedded, call = embed_timed(
            embedder, [normalize_content(rows[i].content) for i in wanted], [contexts[i] for i in wanted]
        )
        embed_log_store.log_embedding(session, call, purpose=JobKind.REEMBED, job_id=job_id)
        for i, vector in zip(wanted, embedded, strict=True):
            shared_vector = SectorVector(embedder.model, vector)
            vectors[i] |= {sector: shared_vector for sector in rows[i].sectors if sector in sectors}
    reembed_store.replace_vectors(session, rows, vectors, sectors=list(targets))
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
    if job is None or job["status"] not in OPEN_JOB:
        return str(job["status"]) if job else "missing"
    if job_store.open_chunk_count(session, job_id):
        return JobStatus.RUNNING
    targets = targets_of(job)
    lock_for_switch(session)
    stale = reembed_store.count_stale_vectors(session, targets)
    if stale:
        if int(job["params"]["round"]) >= MAX_ROUNDS:
            job_store.finish_job(
                session,
                job_id,
                status=JobStatus.FAILED,
                error=(
                    f"{stale} vectors of another model were still being written after {MAX_ROUNDS} rounds: stop the "
                    "processes that write with the old provider (or restart them with the new one), then run the "
                    "re-embed again; nothing is lost, converted memories stay converted"
                ),
            )
            return JobStatus.FAILED
        return "replan"
    previous = current_models(session)
    switch_models(session, targets)
    job_store.finish_job(
        session,
        job_id,
        status=JobStatus.SUCCEEDED,
        result={
            "switched_to": {sector: asdict(t) for sector, t in targets.items()},
            "switched_from": {sector: asdict(previous[sector]) for sector in targets if sector in previous},
            "restart_with": restart_advice(targets),
        },
    )
    return JobStatus.SUCCEEDED


def restart_advice(targets: Mapping[str, StoreModel]) -> str:
    """The setting that makes processes match the converted store."""
    providers = {t.provider for t in targets.values()}
    if len(targets) == 5 and len(providers) == 1:
        return f"MNEMOFLOW_EMBEDDING_PROVIDER={providers.pop()}"
    pairs = ",".join(f"{sector}={t.provider}" for sector, t in sorted(targets.items()))
    return f"MNEMOFLOW_EMBED_MODE=advanced MNEMOFLOW_SECTOR_PROVIDERS={pairs}"
