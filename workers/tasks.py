"""Thin tasks: ids in, re-fetch, call a shared service, idempotent under redelivery."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from celery import Task
from sqlalchemy import text
from sqlalchemy.orm import Session

from shared import ingest_pipeline, reembed
from shared.activity import active_queries
from shared.embedding.calls import EmbeddingFailed
from shared.embedding.local import ModelUnavailable
from shared.lifecycle import CycleOptions, DecayCycle
from shared.sectors import SECTORS
from shared.storage import documents as document_store
from shared.storage import jobs as job_store
from shared.storage import memories as store
from shared.tasks import TaskName, embed_queue
from workers.app import app, context, redis_client, settings, target_embedder

log = logging.getLogger("mnemoflow.worker")


def _run_chunk(
    task: Task, job_id: str, seq: int, work: Callable[[Session, uuid.UUID, int], Any], *, purpose: str
) -> tuple[dict[str, Any], Any]:
    """Count the attempt, run `work` in one transaction, and on error record it and retry with backoff.

    Returns the task's result and what `work` returned (None when skipped or failed for good).
    """
    db, _ = context()
    job = uuid.UUID(job_id)
    with db.session() as session:
        attempts = job_store.start_attempt(session, job, seq)
    if attempts is None:
        log.info("job %s chunk %s is not pending (done or failed); nothing to do", job_id, seq)
        return {"job_id": job_id, "seq": seq, "status": "skipped"}, None
    if attempts > settings.job_max_attempts:  # e.g. it killed the worker every time
        with db.session() as session:
            job_store.fail_chunk(
                session, job, seq, error=f"gave up after {attempts - 1} attempts (worker lost?)", final=True
            )
        return {"job_id": job_id, "seq": seq, "status": "failed"}, None
    try:
        with db.session() as session:
            outcome = work(session, job, seq)
    except Exception as exc:
        final = attempts >= settings.job_max_attempts or isinstance(exc, ModelUnavailable)
        with db.session() as session:
            if isinstance(exc, EmbeddingFailed):
                job_store.log_embedding(session, exc.call, purpose=purpose, job_id=job)
            job_store.fail_chunk(session, job, seq, error=f"{type(exc).__name__}: {exc}", final=final)
        if final:
            log.error("job %s chunk %s failed for good after %s attempts: %s", job_id, seq, attempts, exc)
            return {"job_id": job_id, "seq": seq, "status": "failed"}, None
        log.warning("job %s chunk %s attempt %s failed, retrying: %s", job_id, seq, attempts, exc)
        raise task.retry(exc=exc, countdown=min(60, 2**attempts)) from exc
    if outcome is None:
        log.info("job %s chunk %s is held by another worker; leaving it", job_id, seq)
    return {"job_id": job_id, "seq": seq, "status": "done" if outcome is not None else "held"}, outcome


@app.task(name=TaskName.STORE_CHUNK, bind=True, max_retries=None)
def store_chunk(self: Task, job_id: str, seq: int) -> dict[str, Any]:
    """Embed and store one chunk of a batch job; a redelivered or duplicate message finds it done."""
    _, engine = context()
    result, status = _run_chunk(self, job_id, seq, engine.store_chunk, purpose="batch")
    if status is not None:
        schedule_merge()
        result["job_status"] = status
    return result


@app.task(name=TaskName.INGEST_DOCUMENT, bind=True, max_retries=None)
def ingest_document(self: Task, job_id: str) -> dict[str, Any]:
    """Fetch or read, extract, chunk and plan one document, then send its chunks to the sector queues."""
    db, _ = context()
    outcome = ingest_pipeline.run_ingest(db, settings, uuid.UUID(job_id))
    if outcome.retry_in is not None:
        log.warning("[ingest] job %s: attempt failed, retrying in %.0fs: %s", job_id, outcome.retry_in, outcome.error)
        raise self.retry(countdown=outcome.retry_in)
    for chunk in outcome.chunks:  # committed already; a lost message is re-sent by the sweeper
        app.send_task(
            TaskName.STORE_CHUNK, kwargs={"job_id": job_id, "seq": chunk.seq}, queue=embed_queue(chunk.sector)
        )
    return {"job_id": job_id, "status": outcome.status, "chunks": len(outcome.chunks)}


@app.task(name=TaskName.REEMBED_PLAN)
def reembed_plan(job_id: str) -> dict[str, Any]:
    """Split what is left to re-embed into chunks on the sector queues (or finish when nothing is left)."""
    db, _ = context()
    with db.session() as session:
        chunks = reembed.plan_round(session, uuid.UUID(job_id))
    for chunk in chunks:
        app.send_task(
            TaskName.REEMBED_CHUNK, kwargs={"job_id": job_id, "seq": chunk.seq}, queue=embed_queue(chunk.sector)
        )
    if not chunks:
        app.send_task(TaskName.REEMBED_FINISH, kwargs={"job_id": job_id})
    log.info("[reembed] job %s: planned %d chunk(s)", job_id, len(chunks))
    return {"job_id": job_id, "chunks": len(chunks)}


@app.task(name=TaskName.REEMBED_CHUNK, bind=True, max_retries=None)
def reembed_chunk(self: Task, job_id: str, seq: int) -> dict[str, Any]:
    """Re-embed one chunk of memories with the job's target model; the last chunk asks for the switch."""

    _, engine = context()

    def work(session: Session, job_uuid: uuid.UUID, chunk_seq: int) -> bool | None:
        return reembed.process_chunk(
            session,
            job_uuid,
            chunk_seq,
            target_embedder,
            contexts_of=lambda user_id, ids: engine.stored_contexts(session, user_id, ids),
        )

    result, all_done = _run_chunk(self, job_id, seq, work, purpose=reembed.JOB_KIND)
    if all_done:
        app.send_task(TaskName.REEMBED_FINISH, kwargs={"job_id": job_id})
    return result


@app.task(name=TaskName.REEMBED_FINISH)
def reembed_finish(job_id: str) -> dict[str, Any]:
    """Switch the store to the new model once nothing else is left; otherwise plan another round."""
    db, _ = context()
    with db.session() as session:
        outcome = reembed.finish(session, uuid.UUID(job_id))
    if outcome == "replan":
        app.send_task(TaskName.REEMBED_PLAN, kwargs={"job_id": job_id})
    log.info("[reembed] job %s: %s", job_id, outcome)
    return {"job_id": job_id, "outcome": outcome}


MERGE_PENDING_KEY = "mnemoflow:merge:pending"
EMBED_QUEUES = tuple(embed_queue(sector) for sector in SECTORS)
MERGE_LOCK_KEY = 727275
ANALYZE_EVERY = 5000  # merged vectors between statistics refreshes


def schedule_merge() -> None:
    """Ask for a merge of the fresh tier, at most one pending request at a time (debounced in Redis)."""
    try:
        if redis_client().set(MERGE_PENDING_KEY, "1", nx=True, ex=30):
            app.send_task(TaskName.MERGE_FRESH)
    except Exception as exc:  # the beat schedule merges every minute anyway
        log.warning("could not schedule a fresh-tier merge: %s", exc)


def embed_backlog() -> int:
    """Messages waiting on the embed.<sector> queues (Redis lists named after the queues)."""
    try:
        with redis_client().pipeline(transaction=False) as pipe:
            for queue in EMBED_QUEUES:
                pipe.llen(queue)
            return sum(int(n) for n in pipe.execute())
    except Exception as exc:  # not Redis, or unreachable: never block the merge on it
        log.debug("cannot read the embed queues' length: %s", exc)
        return 0


def ingest_has_priority(session: Session) -> bool:
    """Whether the merge should yield: embedding work is waiting and the fresh tier is still small enough.

    HNSW inserts cost the same CPU the embedding model needs; during a burst the fresh tier (searched
    exactly) absorbs the writes and the merge catches up when the queues are empty.
    """
    cap = settings.merge_yield_max_fresh
    return cap > 0 and embed_backlog() > 0 and store.fresh_vector_count(session, limit=cap) < cap


@app.task(name=TaskName.MERGE_FRESH)
def merge_fresh() -> dict[str, Any]:
    """Move fresh vectors into the HNSW indexes and link their memories, batch by batch, one merger at a time."""
    db, engine = context()
    redis_client().delete(MERGE_PENDING_KEY)  # chunks finishing from now on schedule another run
    merged = links = 0
    started = time.monotonic()
    with db.engine.connect() as lock_conn:
        if not lock_conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": MERGE_LOCK_KEY}).scalar_one():
            return {"skipped": "another merge is running"}
        try:
            since_analyze = ANALYZE_EVERY  # statistics first: the backlog may be large and unseen
            while time.monotonic() - started < settings.merge_time_budget_seconds:
                with db.session() as session:
                    if ingest_has_priority(session):
                        break  # the last chunk of the burst schedules the next merge; beat retries every minute
                analyze = since_analyze >= ANALYZE_EVERY
                with db.session() as session:
                    count, made = engine.merge_fresh(session, limit=settings.merge_batch_size, analyze=analyze)
                since_analyze = count if analyze else since_analyze + count
                merged, links = merged + count, links + made
                if count == 0:
                    break
            else:
                schedule_merge()  # out of time with work left: continue in a fresh task
        finally:
            lock_conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MERGE_LOCK_KEY})
            lock_conn.commit()
    if merged:
        log.info("[merge] indexed %d vectors, %d waypoints in %.1fs", merged, links, time.monotonic() - started)
    return {"merged": merged, "links": links}


@app.task(name=TaskName.REINFORCE_HITS)
def reinforce_hits(
    event_id: str,
    user_id: str,
    memory_ids: list[str],
    traversed: list[list[str]],
    reinforce: bool = True,
    regenerate: bool = False,
) -> dict[str, Any]:
    """A query's after-effects, once per query even if the message is delivered twice: reinforcement, then the
    regeneration of hits that decay had compressed or fingerprinted (its own transaction: if the model fails,
    the reinforcement stands and the next hit tries again)."""
    db, engine = context()
    ids = [uuid.UUID(i) for i in memory_ids]
    with db.session() as session:
        applied = engine.reinforce_hits(
            session,
            event_id=event_id,
            user_id=user_id,
            memory_ids=ids,
            traversed=[(uuid.UUID(a), uuid.UUID(b)) for a, b in traversed],
            reinforce=reinforce,
        )
    regenerated: list[uuid.UUID] = []
    if applied and regenerate:
        try:
            with db.session() as session:
                regenerated = engine.regenerate(
                    session, user_id, ids, boost=0.0 if reinforce else settings.query_reinforce_boost
                )
        except Exception as exc:
            log.warning("[decay] could not regenerate %s: %s", ", ".join(memory_ids), exc)
    return {"event_id": event_id, "applied": applied, "regenerated": [str(i) for i in regenerated]}


@app.task(name=TaskName.REINFORCE_BATCH)
def reinforce_batch(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The after-effects of several queries, as a gateway gathers them: each event applied once, as
    `reinforce_hits` applies one (a redelivered batch skips the events it already applied)."""
    results = [reinforce_hits(**event) for event in events]
    return {"events": len(events), "applied": sum(1 for r in results if r["applied"])}


def decay_cycle_runner() -> DecayCycle:
    db, engine = context()
    client = redis_client()
    return DecayCycle(
        db,
        settings,
        {sector: provider.dim for sector, provider in engine.embedders.items()},
        active_queries=lambda: active_queries(client),
    )


@app.task(name=TaskName.DECAY_CYCLE, bind=True, max_retries=None)
def decay_cycle(
    self: Task, run_id: str | None = None, ratio: float | None = None, trigger: str = "schedule"
) -> dict[str, Any]:
    """One decay cycle (shared/lifecycle.py). A scheduled one that finds queries active tries again a little
    later (OM_DECAY_* seed behaviour: skip while active_q > 0), up to `decay_max_deferrals` times."""
    runner = decay_cycle_runner()
    if trigger == "schedule" and run_id is None and self.request.retries < settings.decay_max_deferrals:
        try:
            active = runner.active_queries()
        except Exception as exc:  # Redis unreachable: no way to know, so do not hold decay back
            log.warning("[decay] cannot read active queries: %s", exc)
            active = 0
        if active > 0:
            log.info("[decay] %d queries active; trying again in %.0fs", active, settings.decay_defer_seconds)
            raise self.retry(countdown=settings.decay_defer_seconds)
    row = runner.run(uuid.UUID(run_id) if run_id else None, CycleOptions(trigger=trigger, ratio=ratio))
    return {"run_id": str(row["id"]), "status": row["status"], "processed": row["processed"], "reason": row["reason"]}


@app.task(name=TaskName.SWEEP_JOBS)
def sweep_jobs() -> dict[str, Any]:
    """Re-send chunks whose message may have been lost (pending for longer than job_stall_seconds), and the
    next step of re-embed and ingest jobs that stopped moving."""
    db, _ = context()
    longest_parse = max(settings.ingest_parse_timeout_seconds, settings.ingest_media_timeout_seconds)
    with db.session() as session:
        stalled = job_store.stalled_chunks(session, older_than_seconds=settings.job_stall_seconds)
        job_store.mark_enqueued(session, stalled)
        idle = job_store.idle_open_jobs(session, reembed.JOB_KIND, older_than_seconds=settings.job_stall_seconds)
        ingests = document_store.stalled_ingest_jobs(
            session, stall_seconds=settings.job_stall_seconds, extract_seconds=longest_parse
        )
        for job_id in [job["id"] for job in idle] + ingests:
            job_store.touch_job(session, job_id)
    for chunk in stalled:
        task = TaskName.REEMBED_CHUNK if chunk.kind == reembed.JOB_KIND else TaskName.STORE_CHUNK
        app.send_task(task, kwargs={"job_id": str(chunk.job_id), "seq": chunk.seq}, queue=embed_queue(chunk.sector))
    for job in idle:  # its planning or its final step was lost: the job knows which one is due
        step = TaskName.REEMBED_PLAN if job["progress_total"] == 0 else TaskName.REEMBED_FINISH
        app.send_task(step, kwargs={"job_id": str(job["id"])})
    for job_id in ingests:  # the document's status tells the task which step is due
        app.send_task(TaskName.INGEST_DOCUMENT, kwargs={"job_id": str(job_id)})
    steps = len(idle) + len(ingests)
    if stalled or steps:
        log.warning("sweeper re-sent %d stalled chunk(s) and %d stalled job step(s)", len(stalled), steps)
    return {"resent": len(stalled), "job_steps": steps}


@app.task(name=TaskName.PRUNE_EMBED_LOGS)
def prune_embed_logs() -> dict[str, Any]:
    """Keep embed_logs to the retention period (MNEMOFLOW_EMBED_LOG_RETENTION_DAYS)."""
    db, _ = context()
    with db.session() as session:
        removed = job_store.prune_embed_logs(session, older_than_days=settings.embed_log_retention_days)
    log.info("[embed_logs] removed %d rows older than %s days", removed, settings.embed_log_retention_days)
    return {"removed": removed}


@app.task(name=TaskName.PRUNE_WAYPOINTS)
def prune_waypoints() -> dict[str, Any]:
    """Drop association links weaker than the prune threshold (architecture seed: weekly, < 0.05)."""
    db, _ = context()
    with db.session() as session:
        removed = store.prune_waypoints(session, below=settings.waypoint_prune_threshold)
    log.info("[waypoints] pruned %d links below %.2f", removed, settings.waypoint_prune_threshold)
    return {"removed": removed}
