"""/maintenance/*: store-wide operator actions (re-embed, decay) and what the embedder and the decay cycles did."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import asdict
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response, status
from pydantic import AfterValidator

from services.gateway import metrics
from services.gateway.deps import PrincipalDep, StateDep, WorkDep
from shared.api.common import MAX_OFFSET, USER_ID_RULE, no_nul
from shared.api.jobs import DecayRequest, DecayRun, ReembedAccepted, ReembedRequest
from shared.api.memories import MemoryPage, MemoryPublic
from shared.embedding import EmbeddingProvider, reembed
from shared.embedding.calls import EmbeddingFailed, embed_timed
from shared.embedding.factory import embedder_for
from shared.embedding.http import DimensionMismatch
from shared.embedding.local import ModelUnavailable
from shared.errors import InvalidInput, ServiceUnavailable
from shared.jobs import JobKind, PlanReembed, RunDecayCycle
from shared.lifecycle.decay_cycle import format_line
from shared.memory import records
from shared.memory.sectors import SECTORS
from shared.model.embedders import StoreModel
from shared.model.statuses import RUN_ENDED, JobStatus, RunStatus
from shared.monitoring import store

log = logging.getLogger("mnemoflow.gateway")
router = APIRouter(prefix="/maintenance", tags=["maintenance"])


def _target_embedder(state: Any, body: ReembedRequest) -> EmbeddingProvider:
    """Build (and try once) the provider the store should move to, so a bad target fails here, not in a worker."""
    for current in state.engine.embedders.values():
        if body.provider == current.name and body.dimensions in (None, current.dim):
            return current
    try:
        embedder = embedder_for(state.settings, body.provider, dim=body.dimensions)
    except (ModelUnavailable, ValueError) as exc:
        raise InvalidInput(f"cannot use the {body.provider} provider: {exc}") from exc
    try:
        embed_timed(embedder, ["a sentence to check that the provider answers"])
    except EmbeddingFailed as exc:
        if isinstance(exc.__cause__, DimensionMismatch):  # it answered: the request named the wrong size
            answered = exc.__cause__.answered
            raise InvalidInput(
                f"dimensions: the {body.provider} model ({embedder.model}) answers {answered}-dimensional vectors, "
                f"not {body.dimensions}; ask for dimensions={answered}",
                details={"dimensions": body.dimensions, "answered": answered},
            ) from exc
        raise ServiceUnavailable(f"the {body.provider} provider did not answer: {exc}") from exc
    return embedder


@router.post("/reembed", status_code=status.HTTP_202_ACCEPTED, response_model=ReembedAccepted)
def start_reembed(
    body: ReembedRequest, state: StateDep, work: WorkDep, principal: PrincipalDep, response: Response
) -> dict[str, Any]:
    """Re-embed every memory with another provider on the sector queues; the store switches when all are done.

    Workers build the target provider from their own settings (API keys, URLs, model paths). Follow the
    job with GET /jobs/{id}; when it succeeds, restart the stack with the new MNEMOFLOW_EMBEDDING_PROVIDER.
    """
    principal.require_admin()
    embedder = _target_embedder(state, body)
    target = StoreModel.of(embedder)
    targets = dict.fromkeys(body.sectors or SECTORS, target)
    previous = reembed.store_models(work.session)
    job_id = reembed.start_job(work.session, targets, chunk_size=state.settings.reembed_chunk_size)
    work.enqueue(PlanReembed(job_id=job_id))  # after the commit; if the broker is down, the sweeper sends it
    metrics.JOBS_ENQUEUED.labels(kind=JobKind.REEMBED).inc()
    log.info("re-embed job %s: sectors %s -> %s", job_id, ", ".join(targets), target)
    response.headers["Location"] = f"/jobs/{job_id}"
    return {
        "job_id": str(job_id),
        "status": JobStatus.QUEUED,
        "sectors": list(targets),
        "from": {sector: asdict(previous[sector]) for sector in targets if sector in previous},
        "to": asdict(target),
        "restart_with": reembed.restart_advice({s: previous[s] for s in SECTORS if s in previous} | targets),
        "status_url": f"/jobs/{job_id}",
    }


@router.get("/embed-logs")
def embed_logs(
    work: WorkDep,
    principal: PrincipalDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    status_: Annotated[Literal["completed", "failed"] | None, Query(alias="status")] = None,
) -> dict[str, Any]:
    """The embedder's recent calls (newest first) and per-purpose totals of the last 24 hours."""
    principal.require_admin()
    items, totals = store.embed_calls(work.session, limit=limit, status=status_)
    return {"items": items, "last_24h": totals}


def _run_public(run: dict[str, Any]) -> dict[str, Any]:
    out = {k: (str(v) if isinstance(v, uuid.UUID) else v) for k, v in run.items() if k != "plan"}
    out["segments_done"] = sum(1 for segment in run["plan"] if segment.get("finished"))
    out["planned"] = sum(int(segment.get("quota", 0)) for segment in run["plan"])  # what `processed` counts up to
    if run["status"] == RunStatus.SUCCEEDED:
        out["log"] = format_line(run)
    return out


@router.post("/decay", status_code=status.HTTP_202_ACCEPTED, response_model=DecayRun)
def run_decay(
    state: StateDep,
    principal: PrincipalDep,
    response: Response,
    body: DecayRequest | None = None,
    wait: Annotated[bool, Query(description="wait for the cycle to finish (up to `timeout` seconds)")] = False,
    timeout: Annotated[float, Query(gt=0, le=600)] = 60.0,
) -> dict[str, Any]:
    """Run a decay cycle now on the maintenance queue: `{"ratio": 1.0}` decays every memory.

    An operator's cycle does not wait for queries to go quiet or for the cooldown, but it never runs beside
    another cycle (that one wins; this one is recorded as skipped). Follow it at GET /maintenance/decay/{id}.
    """
    principal.require_admin()
    ratio = body.ratio if body and body.ratio is not None else state.settings.decay.ratio
    with state.unit_of_work(store_wide=True) as work:
        run_id = store.start_decay_run(work.session, ratio=ratio)
        # sent after the commit; if the broker is down, the run stays queued and the sweeper sends it
        work.enqueue(RunDecayCycle(run_id=run_id, ratio=ratio, trigger="operator"))
    metrics.JOBS_ENQUEUED.labels(kind="decay").inc()
    response.headers["Location"] = f"/maintenance/decay/{run_id}"
    deadline = time.monotonic() + timeout
    while True:
        with state.maintenance.reading() as session:
            run = store.decay_run(session, run_id)
        if not wait or run["status"] in RUN_ENDED or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if run["status"] in RUN_ENDED:
        response.status_code = status.HTTP_200_OK
    return _run_public(run) | {"status_url": f"/maintenance/decay/{run_id}"}


@router.get("/decay/{run_id}", response_model=DecayRun)
def decay_run(run_id: uuid.UUID, work: WorkDep, principal: PrincipalDep) -> dict[str, Any]:
    """One decay cycle: status, counts so far (processed, changed, tiers, compressed, fingerprinted), timing."""
    principal.require_admin()
    return _run_public(store.decay_run(work.session, run_id))


@router.get("/stats")
def lifecycle_stats(
    state: StateDep,
    work: WorkDep,
    principal: PrincipalDep,
    runs: Annotated[int, Query(ge=0, le=100, description="how many recent decay runs to include")] = 10,
) -> dict[str, Any]:
    """Tier distribution, compression states, the fresh tier's backlog, and the recent decay runs, store-wide."""
    principal.require_admin()
    decay, compression, reinforcement = state.settings.decay, state.settings.compression, state.settings.reinforcement
    stats, recent, waiting = store.lifecycle(work.session, runs)
    return {
        "tiers": {tier: stats[tier] for tier in ("hot", "warm", "cold")},
        "compression": {state_: stats[state_] for state_ in ("full", "compressed", "fingerprinted")},
        "compressed_by_dim": stats["compressed_by_dim"],
        "memories": stats["memories"],
        "avg_salience": stats["avg_salience"],
        # Vectors stored by bulk writes that the merge has not yet moved into the HNSW indexes (the fresh tier): their
        # tenants' queries read them all until it has (GET /sectors: one tenant's).
        "index": {
            "fresh_vectors": sum(waiting.values()),
            "fresh_by_sector": {sector: waiting.get(sector, 0) for sector in SECTORS},
        },
        "recent_runs": [_run_public(r) for r in recent],
        "settings": {
            "decay_interval_minutes": decay.interval_minutes,
            "decay_ratio": decay.ratio,
            "cold_threshold": compression.cold_threshold,
            "min_vector_dim": compression.min_dim,
            "max_vector_dim": compression.max_dim,
            "regeneration_enabled": reinforcement.regenerate,
            "reinforce_on_query": reinforcement.on_query,
        },
    }


@router.get("/user-ids")
def nonconforming_user_ids(work: WorkDep, principal: PrincipalDep) -> dict[str, Any]:
    """Stored user ids that no request can name any more (rows made before the user_id rule): per table, the rows,
    how many such user ids and a few of them. A scan of each table."""
    principal.require_admin()
    return {"rule": USER_ID_RULE, "tables": store.unnamed_user_ids(work.session)}


@router.get("/user-ids/memories", response_model=MemoryPage)
def memories_of_stored_user_id(
    work: WorkDep,
    principal: PrincipalDep,
    stored_user_id: Annotated[
        str,
        Query(min_length=1, description="a user_id as stored, whatever it is"),
        AfterValidator(lambda value: no_nul(value, "stored_user_id")),
    ],
    u: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="offset")] = 0,
    l: Annotated[int, Query(ge=1, le=1000, description="limit")] = 100,  # noqa: E741
) -> MemoryPage:
    """The memories of any stored user id, newest first, for the operator: how rows whose user id no request can
    name any more stay readable (to export them, or to check a rename)."""
    principal.require_admin()
    rows, total = records.memories_page(work.session, stored_user_id, offset=u, limit=l)
    return MemoryPage(items=[MemoryPublic(**r) for r in rows], total=total, offset=u, limit=l)
