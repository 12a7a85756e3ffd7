"""/maintenance/*: store-wide operator actions (re-embed, decay) and what the embedder and the decay cycles did."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import asdict
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response, status

from services.gateway import metrics
from services.gateway.deps import PrincipalDep, StateDep
from shared import reembed
from shared.embedding import EmbeddingProvider
from shared.embedding.calls import embed_timed
from shared.embedding.factory import embedder_for
from shared.embedding.local import ModelUnavailable
from shared.errors import InvalidInput, NotFound, ServiceUnavailable
from shared.lifecycle import format_line
from shared.schemas import DecayRequest, ReembedRequest
from shared.sectors import SECTORS
from shared.storage import decay as decay_store
from shared.storage import jobs as job_store
from shared.storage.models import StoreModel, current_models
from shared.tasks import TaskName

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
    except Exception as exc:
        raise ServiceUnavailable(f"the {body.provider} provider did not answer: {exc}") from exc
    return embedder


@router.post("/reembed", status_code=status.HTTP_202_ACCEPTED)
def start_reembed(body: ReembedRequest, state: StateDep, principal: PrincipalDep, response: Response) -> dict[str, Any]:
    """Re-embed every memory with another provider on the sector queues; the store switches when all are done.

    Workers build the target provider from their own settings (API keys, URLs, model paths). Follow the
    job with GET /jobs/{id}; when it succeeds, restart the stack with the new MNEMOFLOW_EMBEDDING_PROVIDER.
    """
    principal.require_admin()
    embedder = _target_embedder(state, body)
    target = StoreModel(embedder.name, embedder.model, embedder.dim)
    targets = dict.fromkeys(body.sectors or SECTORS, target)
    with state.db.session() as session:
        previous = current_models(session)
        job_id = reembed.start_job(session, targets, chunk_size=state.settings.reembed_chunk_size)
    state.celery.send_task(TaskName.REEMBED_PLAN, kwargs={"job_id": str(job_id)})
    metrics.JOBS_ENQUEUED.labels(kind=reembed.JOB_KIND).inc()
    log.info("re-embed job %s: sectors %s -> %s", job_id, ", ".join(targets), target)
    response.headers["Location"] = f"/jobs/{job_id}"
    return {
        "job_id": str(job_id),
        "status": "queued",
        "sectors": list(targets),
        "from": {sector: asdict(previous[sector]) for sector in targets if sector in previous},
        "to": asdict(target),
        "restart_with": reembed.restart_advice({s: previous[s] for s in SECTORS if s in previous} | targets),
        "status_url": f"/jobs/{job_id}",
    }


@router.get("/embed-logs")
def embed_logs(
    state: StateDep,
    principal: PrincipalDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    status_: Annotated[Literal["completed", "failed"] | None, Query(alias="status")] = None,
) -> dict[str, Any]:
    """The embedder's recent calls (newest first) and per-purpose totals of the last 24 hours."""
    principal.require_admin()
    with state.db.session() as session:
        items = job_store.recent_embed_logs(session, limit=limit, status=status_)
        totals = job_store.embed_log_totals(session, hours=24)
    return {"items": items, "last_24h": totals}


def _run_public(run: dict[str, Any]) -> dict[str, Any]:
    out = {k: (str(v) if isinstance(v, uuid.UUID) else v) for k, v in run.items() if k != "plan"}
    out["segments_done"] = sum(1 for segment in run["plan"] if segment.get("finished"))
    if run["status"] == "succeeded":
        out["log"] = format_line(run)
    return out


@router.post("/decay", status_code=status.HTTP_202_ACCEPTED)
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
    ratio = body.ratio if body and body.ratio is not None else state.settings.decay_ratio
    with state.db.session() as session:
        run_id = decay_store.create_run(session, trigger="operator", ratio=ratio)
    state.celery.send_task(TaskName.DECAY_CYCLE, kwargs={"run_id": str(run_id), "ratio": ratio, "trigger": "operator"})
    metrics.JOBS_ENQUEUED.labels(kind="decay").inc()
    response.headers["Location"] = f"/maintenance/decay/{run_id}"
    deadline = time.monotonic() + timeout
    while True:
        with state.db.session() as session:
            run = decay_store.get_run(session, run_id)
        assert run is not None
        if not wait or run["status"] in ("succeeded", "skipped", "failed") or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if run["status"] in ("succeeded", "skipped", "failed"):
        response.status_code = status.HTTP_200_OK
    return _run_public(run) | {"status_url": f"/maintenance/decay/{run_id}"}


@router.get("/decay/{run_id}")
def decay_run(run_id: uuid.UUID, state: StateDep, principal: PrincipalDep) -> dict[str, Any]:
    """One decay cycle: status, counts so far (processed, changed, tiers, compressed, fingerprinted), timing."""
    principal.require_admin()
    with state.db.session() as session:
        run = decay_store.get_run(session, run_id)
    if run is None:
        raise NotFound(f"decay run {run_id} not found")
    return _run_public(run)


@router.get("/stats")
def lifecycle_stats(
    state: StateDep,
    principal: PrincipalDep,
    runs: Annotated[int, Query(ge=0, le=100, description="how many recent decay runs to include")] = 10,
) -> dict[str, Any]:
    """Tier distribution, compression states, and the recent decay runs, store-wide."""
    principal.require_admin()
    with state.db.session() as session:
        stats = decay_store.lifecycle_stats(session, None)
        recent = decay_store.recent_runs(session, runs)
    return {
        "tiers": {tier: stats[tier] for tier in ("hot", "warm", "cold")},
        "compression": {state_: stats[state_] for state_ in ("full", "compressed", "fingerprinted")},
        "compressed_by_dim": stats["compressed_by_dim"],
        "memories": stats["memories"],
        "avg_salience": stats["avg_salience"],
        "recent_runs": [_run_public(r) for r in recent],
        "settings": {
            "decay_interval_minutes": state.settings.decay_interval_minutes,
            "decay_ratio": state.settings.decay_ratio,
            "cold_threshold": state.settings.decay_cold_threshold,
            "min_vector_dim": state.settings.min_vector_dim,
            "max_vector_dim": state.settings.max_vector_dim,
            "regeneration_enabled": state.settings.regeneration_enabled,
            "reinforce_on_query": state.settings.decay_reinforce_on_query,
        },
    }
