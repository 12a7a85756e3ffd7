"""/maintenance/*: store-wide operator actions (re-embed) and what the embedder has been doing."""

from __future__ import annotations

import logging
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
from shared.errors import InvalidInput, ServiceUnavailable
from shared.schemas import ReembedRequest
from shared.sectors import SECTORS
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
