"""Thin tasks: a message in (shared.jobs), re-fetch, call a shared service, idempotent under redelivery."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from celery import Task
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from shared.db import Database
from shared.embedding import reembed
from shared.embedding.calls import EmbeddingFailed
from shared.embedding.local import ModelUnavailable
from shared.errors import public_message
from shared.ingest import pipeline as ingest_pipeline
from shared.jobs import (
    EraseTenant,
    FinishReembed,
    ImportChunk,
    IngestDocument,
    JobKind,
    MergeFresh,
    Message,
    PlanReembed,
    PruneAppliedEvents,
    PruneEmbedLogs,
    PruneWaypoints,
    ReembedChunk,
    RegenerateSummary,
    ReinforceBatch,
    ReinforceHits,
    RunDecayCycle,
    StoreChunk,
    SweepJobs,
    chunk_message,
)
from shared.lifecycle import reinforcement
from shared.lifecycle.activity import active_queries
from shared.lifecycle.decay_cycle import CycleOptions, DecayCycle
from shared.lifecycle.merge_cycle import MergeCycle, embed_backlog
from shared.lifecycle.reinforcement import QueryUse
from shared.memory.chunks import store_chunk as store_job_chunk
from shared.model.statuses import ChunkResult
from shared.queueing import send as send_with
from shared.storage import backlog, cancels, decay_runs, leases
from shared.storage import documents as document_store
from shared.storage import embed_logs as embed_log_store
from shared.storage import events as event_store
from shared.storage import jobs as job_store
from shared.storage import waypoints as waypoint_store
from workers import metrics
from workers.app import app, context, redis_client, settings, store_wide, target_embedder

log = logging.getLogger("mnemoflow.worker")
MERGE_PENDING_KEY = "mnemoflow:merge:pending"
MERGE_AGAIN_SECONDS = 5.0  # a merge that yielded to ingestion, or found another running, looks again this soon
DATABASE_AWAY = 5  # seconds before a task that could not reach the database tries again
DECAY_RUN_IDS = uuid.UUID("6d6e656d-6f66-6c6f-7764-656361790000")  # namespace of scheduled runs' ids


def send(*messages: Message, countdown: float | None = None) -> None:
    send_with(app, *messages, countdown=countdown)


def _run_chunk(
    task: Task,
    message: StoreChunk | ReembedChunk | ImportChunk,
    work: Callable[[Session, uuid.UUID, int, str], Any],
    *,
    purpose: str,
    db: Database,
) -> tuple[dict[str, Any], Any]:
    """Claim the chunk (the attempt counts here), run `work` in one transaction on `db` (a tenant's, or the store's
    for a re-embed), and on error record it and retry with backoff. A duplicate message finds the chunk claimed or
    done and leaves without counting an attempt. Returns the task's result (`ChunkResult`) and what `work` returned
    (None when skipped or failed for good).
    """
    job, seq = message.job_id, message.seq
    summary: dict[str, Any] = {"job_id": str(job), "seq": seq}
    owner = leases.owner_token()
    try:
        with db.session() as session:
            claim = leases.claim_chunk(session, job, seq, owner=owner, ttl=settings.job_lease_seconds)
    except DBAPIError as exc:  # the database is away: the message waits for it, the work unclaimed and uncounted
        log.warning("job %s chunk %s: cannot reach the database (%s); again in %ss", job, seq, exc, DATABASE_AWAY)
        raise task.retry(exc=exc, countdown=DATABASE_AWAY) from exc
    attempts = claim.attempts
    if attempts is None and claim.lease_left is not None:
        log.info("job %s chunk %s: claimed by a worker that may have died; again in %.0fs", job, seq, claim.lease_left)
        raise task.retry(countdown=claim.lease_left + 1)
    if attempts is None:
        log.info("job %s chunk %s is done, failed or being worked on; nothing to do", job, seq)
        return summary | {"status": ChunkResult.SKIPPED}, None
    if attempts > settings.job_max_attempts:  # e.g. it killed the worker every time
        with db.session() as session:
            job_store.fail_chunk(
                session, job, seq, error=f"gave up after {attempts - 1} attempts (worker lost?)", final=True
            )
        return summary | {"status": ChunkResult.FAILED}, None
    try:
        with db.session() as session:
            outcome = work(session, job, seq, owner)
    except Exception as exc:
        final = attempts >= settings.job_max_attempts or isinstance(exc, ModelUnavailable)
        retry_in = min(60, 2**attempts)
        with db.session() as session:
            if isinstance(exc, EmbeddingFailed):
                embed_log_store.log_embedding(session, exc.call, purpose=purpose, job_id=job)
            job_store.fail_chunk(  # tenants read it: public_message masks addresses
                session, job, seq, error=public_message(exc), final=final, retry_in=retry_in
            )
        if final:
            log.error("job %s chunk %s failed for good after %s attempts: %s", job, seq, attempts, exc)
            return summary | {"status": ChunkResult.FAILED}, None
        log.warning("job %s chunk %s attempt %s failed, retrying: %s", job, seq, attempts, exc)
        raise task.retry(exc=exc, countdown=retry_in) from exc
    if outcome is None:
        log.info("job %s chunk %s is held by another worker; leaving it", job, seq)
    return summary | {"status": ChunkResult.DONE if outcome is not None else ChunkResult.HELD}, outcome


@app.task(name=StoreChunk.task, bind=True, max_retries=None)
def store_chunk(self: Task, **kwargs: Any) -> dict[str, Any]:
    """Embed and store one chunk of a batch or ingest job; a redelivered or duplicate message finds it done."""
    message = StoreChunk.received(kwargs)
    db, engine = context()
    stored: list[int] = [0, 0]  # created, duplicates: counted once the chunk's transaction committed

    def work(session: Session, job_id: uuid.UUID, seq: int, owner: str) -> str | None:
        def count(created: int, duplicates: int) -> None:
            stored[:] = [created, duplicates]

        return store_job_chunk(engine, session, job_id, seq, owner, on_stored=count)

    result, status = _run_chunk(self, message, work, purpose=JobKind.BATCH, db=db.bound(message.user_id))
    metrics.chunk_done(metrics.queue_of(self), result["status"], *stored)
    if status is not None:
        schedule_merge()
        result["job_status"] = status
    return result


@app.task(
    name=IngestDocument.task,
    bind=True,
    max_retries=None,
    time_limit=settings.ingest_time_limit,
    soft_time_limit=settings.ingest_time_limit - 30,
)
def ingest_document(self: Task, **kwargs: Any) -> dict[str, Any]:
    """Fetch or read, extract, chunk and plan one document, then send its chunks to the sector queues."""
    message = IngestDocument.received(kwargs)
    db, engine = context()
    try:
        outcome = ingest_pipeline.run_ingest(db.bound(message.user_id), settings, message.job_id, engine.tokens)
    except DBAPIError as exc:  # the database went away: its lease runs out, and this message tries again
        log.warning("[ingest] job %s: cannot reach the database (%s); again in %ss", message.job_id, exc, DATABASE_AWAY)
        raise self.retry(exc=exc, countdown=DATABASE_AWAY) from exc
    metrics.document_step(outcome.fmt, outcome.status, outcome.stages_ms)
    for companion in outcome.companions:  # claimed with this one; a retry of theirs is the sweeper's to send
        metrics.document_step(companion.fmt, companion.status, companion.stages_ms)
        send(*companion.chunks)
    if outcome.retry_in is not None:
        log.warning(
            "[ingest] job %s: attempt failed, retrying in %.0fs: %s", message.job_id, outcome.retry_in, outcome.error
        )
        raise self.retry(countdown=outcome.retry_in)
    send(*outcome.chunks)  # committed already; a lost message is re-sent by the sweeper
    grouped = {"grouped_with": len(outcome.companions)} if outcome.companions else {}
    return {"job_id": str(message.job_id), "status": outcome.status, "chunks": len(outcome.chunks), **grouped}


@app.task(name=PlanReembed.task)
def reembed_plan(**kwargs: Any) -> dict[str, Any]:
    """Split what is left to re-embed into chunks on the sector queues (or finish when nothing is left)."""
    job_id = PlanReembed.received(kwargs).job_id
    with store_wide().session() as session:
        chunks = reembed.plan_round(session, job_id)
    send(*(ReembedChunk(job_id=job_id, seq=chunk.seq, sector=chunk.sector) for chunk in chunks))
    if not chunks:
        send(FinishReembed(job_id=job_id))
    log.info("[reembed] job %s: planned %d chunk(s)", job_id, len(chunks))
    return {"job_id": str(job_id), "chunks": len(chunks)}


@app.task(name=ReembedChunk.task, bind=True, max_retries=None)
def reembed_chunk(self: Task, **kwargs: Any) -> dict[str, Any]:
    """Re-embed one chunk of memories with the job's target model; the last chunk asks for the switch."""
    message = ReembedChunk.received(kwargs)
    _, engine = context()

    def work(session: Session, job_id: uuid.UUID, seq: int, owner: str) -> bool | None:
        return reembed.process_chunk(
            session,
            job_id,
            seq,
            target_embedder,
            contexts_of=lambda user_id, ids: engine.stored_contexts(session, user_id, ids),
            owner=owner,
        )

    result, all_done = _run_chunk(self, message, work, purpose=JobKind.REEMBED, db=store_wide())
    metrics.chunk_done(metrics.queue_of(self), result["status"])
    if all_done:
        send(FinishReembed(job_id=message.job_id))
    return result


@app.task(name=FinishReembed.task)
def reembed_finish(**kwargs: Any) -> dict[str, Any]:
    """Switch the store to the new model once nothing else is left; otherwise plan another round."""
    job_id = FinishReembed.received(kwargs).job_id
    with store_wide().session() as session:
        outcome = reembed.finish(session, job_id)
    if outcome == "replan":
        send(PlanReembed(job_id=job_id))
    log.info("[reembed] job %s: %s", job_id, outcome)
    return {"job_id": str(job_id), "outcome": outcome}


def schedule_merge(countdown: float | None = None) -> None:
    """Ask for a merge of the fresh tier (in `countdown` s), at most one pending request at a time (in Redis)."""
    try:
        if redis_client().set(MERGE_PENDING_KEY, "1", nx=True, ex=30):
            send(MergeFresh(), countdown=countdown)
    except Exception as exc:  # the beat schedule merges every minute anyway
        log.warning("could not schedule a fresh-tier merge: %s", exc)


@app.task(name=MergeFresh.task)
def merge_fresh(**kwargs: Any) -> dict[str, Any]:
    """One run of the merge cycle (shared/lifecycle/merge_cycle.py), continued in a fresh task when its time
    budget runs out with work left."""
    MergeFresh.received(kwargs)
    _, engine = context()
    redis_client().delete(MERGE_PENDING_KEY)  # chunks finishing from now on schedule another run
    outcome = MergeCycle(store_wide(), engine, settings, embed_backlog=lambda: embed_backlog(redis_client())).run()
    if outcome.unfinished or outcome.skipped or outcome.yielded:  # the lock's holder may stop (docs/lifecycle.md)
        schedule_merge(countdown=None if outcome.unfinished else MERGE_AGAIN_SECONDS)
    if outcome.skipped:
        return {"skipped": "another merge is running"}
    return {"merged": outcome.merged, "links": outcome.links, "yielded": outcome.yielded}


@app.task(name=ReinforceHits.task)
def reinforce_hits(**kwargs: Any) -> dict[str, Any]:
    """A query's after-effects, once per query even if the message is delivered twice: reinforcement, then the
    regeneration of hits that decay had compressed or fingerprinted (its own transaction: if the model fails,
    the reinforcement stands and the next hit tries again)."""
    message = ReinforceHits.received(kwargs)
    (regenerated,) = after_effects(message.user_id, [message]).values()
    applied = regenerated is not None
    return {"event_id": message.event_id, "applied": applied, "regenerated": [str(i) for i in regenerated or ()]}


@app.task(name=ReinforceBatch.task)
def reinforce_batch(**kwargs: Any) -> dict[str, Any]:
    """The after-effects of several queries, as a gateway gathers them: each tenant's reinforcement in one
    transaction (`reinforcement.reinforce_uses`), each event applied once (a redelivered batch skips the events
    it already applied), then the regenerations its events ask for."""
    events = ReinforceBatch.received(kwargs).events
    tenants: dict[str, list[ReinforceHits]] = {}
    for event in events:
        tenants.setdefault(event.user_id, []).append(event)
    applied = 0
    for user_id, theirs in tenants.items():
        applied += sum(1 for done in after_effects(user_id, theirs).values() if done is not None)
    return {"events": len(events), "applied": applied}


def after_effects(user_id: str, events: list[ReinforceHits]) -> dict[str, list[uuid.UUID] | None]:
    """Apply one tenant's query events: per event id, the memories regenerated (None: applied before)."""
    db, engine = context()
    db = db.bound(user_id)
    uses = [QueryUse(e.event_id, e.memory_ids, e.traversed, e.reinforce) for e in events]
    with db.session() as session:
        applied = reinforcement.reinforce_uses(engine, session, user_id, uses)
    out: dict[str, list[uuid.UUID] | None] = {}
    for event in events:
        if event.event_id in out:
            continue
        if event.event_id not in applied:
            out[event.event_id] = None
            continue
        out[event.event_id] = []
        if not event.regenerate:
            continue
        boost = 0.0 if event.reinforce else engine.reinforcement.query_boost
        try:
            with db.session() as session:
                out[event.event_id] = reinforcement.regenerate(engine, session, user_id, event.memory_ids, boost=boost)
        except Exception as exc:
            log.warning("[decay] could not regenerate %s: %s", ", ".join(map(str, event.memory_ids)), exc)
    return out


def decay_cycle_runner() -> DecayCycle:
    _, engine = context()
    client = redis_client()
    return DecayCycle(
        store_wide(),
        settings,
        {sector: provider.dim for sector, provider in engine.embedders.items()},
        active_queries=lambda: active_queries(client),
    )


@app.task(name=RunDecayCycle.task, bind=True, max_retries=None)
def decay_cycle(self: Task, **kwargs: Any) -> dict[str, Any]:
    """One decay cycle (shared/lifecycle/decay_cycle.py). A scheduled one that finds queries active tries again a
    little later (OM_DECAY_* seed behaviour: skip while active_q > 0), up to `decay.max_deferrals` times."""
    message = RunDecayCycle.received(kwargs)
    schedule = settings.decay
    runner = decay_cycle_runner()
    if message.trigger == "schedule" and message.run_id is None and self.request.retries < schedule.max_deferrals:
        try:
            active = runner.active_queries()
        except Exception as exc:  # Redis unreachable: no way to know, so do not hold decay back
            log.warning("[decay] cannot read active queries: %s", exc)
            active = 0
        if active > 0:
            log.info("[decay] %d queries active; trying again in %.0fs", active, schedule.defer_seconds)
            raise self.retry(countdown=schedule.defer_seconds)
    # A scheduled run is named after its message, so a redelivery after it succeeded finds it done.
    run_id = message.run_id or uuid.uuid5(DECAY_RUN_IDS, str(self.request.id))
    row = runner.run(run_id, CycleOptions(trigger=message.trigger, ratio=message.ratio))
    return {"run_id": str(row["id"]), "status": row["status"], "processed": row["processed"], "reason": row["reason"]}


@app.task(name=SweepJobs.task)
def sweep_jobs(**kwargs: Any) -> dict[str, Any]:
    """Re-send work whose worker died (its lease ran out) or whose message looks lost (never claimed
    job_stall_seconds after it was sent): chunks, the next step of re-embed and ingest jobs, summary regenerations,
    operators' decay runs still queued, and decay runs left running by a dead process."""
    SweepJobs.received(kwargs)
    stall = settings.job_stall_seconds
    with store_wide().session() as session:
        stalled = leases.stalled_chunks(session, older_than_seconds=stall)
        leases.mark_enqueued(session, stalled)
        closed = cancels.close_cancelled_chunks(session)  # never re-sent
        idle = job_store.idle_open_jobs(session, JobKind.REEMBED, older_than_seconds=stall)
        erasures = job_store.idle_open_jobs(session, JobKind.ERASE, older_than_seconds=stall)
        ingests = document_store.stalled_ingest_jobs(session, stall_seconds=stall)
        summary_jobs = job_store.idle_open_jobs(session, JobKind.SUMMARY, older_than_seconds=stall)
        for job_id in [job["id"] for job in idle + summary_jobs + erasures] + [job_id for job_id, _ in ingests]:
            job_store.touch_job(session, job_id)
        runs = decay_runs.queued_runs(session, older_than_seconds=stall) + decay_runs.orphaned_runs(session)
        priorities = {user: backlog.priority_of(session, user, 0, fair=settings.fair_queues) for _, user in ingests}
    send(*(chunk_message(c.kind, c.job_id, c.seq, c.sector, c.user_id, c.priority) for c in stalled))
    # a re-embed's planning or its final step was lost: the job knows which one is due
    send(
        *(
            PlanReembed(job_id=job["id"]) if job["progress_total"] == 0 else FinishReembed(job_id=job["id"])
            for job in idle
        )
    )
    send(*(IngestDocument(job_id=job_id, user_id=user_id, priority=priorities[user_id]) for job_id, user_id in ingests))
    send(*(RunDecayCycle(run_id=run["id"], ratio=run["ratio"], trigger=run["trigger"]) for run in runs))
    send(*(RegenerateSummary(job_id=job["id"], user_id=job["user_id"]) for job in summary_jobs))
    send(*(EraseTenant(job_id=job["id"]) for job in erasures))
    steps = len(idle) + len(ingests) + len(runs) + len(summary_jobs) + len(erasures)
    if stalled or steps:
        log.warning("sweeper re-sent %d stalled chunk(s) and %d stalled job step(s)", len(stalled), steps)
    return {"resent": len(stalled), "job_steps": steps, "cancelled_chunks_closed": closed}


@app.task(name=PruneEmbedLogs.task)
def prune_embed_logs(**kwargs: Any) -> dict[str, Any]:
    """Keep embed_logs to the retention period (MNEMOFLOW_EMBED_LOG_RETENTION_DAYS)."""
    PruneEmbedLogs.received(kwargs)
    with store_wide().session() as session:
        removed = embed_log_store.prune_embed_logs(session, older_than_days=settings.embed_log_retention_days)
    log.info("[embed_logs] removed %d rows older than %s days", removed, settings.embed_log_retention_days)
    return {"removed": removed}


@app.task(name=PruneAppliedEvents.task)
def prune_applied_events(**kwargs: Any) -> dict[str, Any]:
    """Forget event ids older than any redelivery can be (MNEMOFLOW_APPLIED_EVENT_RETENTION_DAYS)."""
    PruneAppliedEvents.received(kwargs)
    days = settings.applied_event_retention_days
    with store_wide().session() as session:
        removed = event_store.prune_applied_events(session, older_than_days=days)
    log.info("[events] forgot %d applied event ids older than %s days", removed, days)
    return {"removed": removed}


@app.task(name=PruneWaypoints.task)
def prune_waypoints(**kwargs: Any) -> dict[str, Any]:
    """Drop association links weaker than the prune threshold (architecture seed: weekly, < 0.05)."""
    PruneWaypoints.received(kwargs)
    below = settings.waypoints.prune_below
    with store_wide().session() as session:
        removed = waypoint_store.prune_waypoints(session, below=below)
    log.info("[waypoints] pruned %d links below %.2f", removed, below)
    return {"removed": removed}
