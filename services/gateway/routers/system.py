"""/health, /sectors, /jobs/{id}, and the operator's /metrics and API docs (/docs, /redoc, /openapi.json)."""

from __future__ import annotations

import uuid
from dataclasses import asdict
from typing import Any

import redis
from fastapi import APIRouter, Depends, Request, Response
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from services.gateway.deps import CallerDep, PrincipalDep, StateDep, WorkDep, require_operator
from services.gateway.job_views import job_public
from shared import __version__
from shared.api.common import UserId
from shared.api.jobs import JobPublic
from shared.errors import NotFound, public_message
from shared.jobs import ALL_QUEUES
from shared.memory import records
from shared.memory import sectors as sector_rules
from shared.model.embedders import StoreModel
from shared.retrieval import stats as retrieval_stats

router = APIRouter(tags=["system"])


_NOT_SERVING: dict[int | str, dict[str, Any]] = {
    503: {
        "description": "the database or the broker is down, or a work queue has no ready process (`ok` false)",
        "headers": {"Retry-After": {"description": "seconds until the next reading", "schema": {"type": "integer"}}},
    }
}


@router.get("/health", responses=_NOT_SERVING)
async def health(state: StateDep, response: Response, caller: CallerDep) -> dict[str, Any]:
    """Whether the stack can serve: the database and the broker answer and every work queue has a ready process
    (else 503 with Retry-After). To a caller with a key, also the version and the embedding provider, model and
    store; to the operator, the workers: how many processes are ready per queue, and which cannot work and why. A
    probe needs no key, and costs no query: the state is read in the background (services/gateway/health.py)."""
    reading = state.health.current()
    idle = reading.idle_queues(ALL_QUEUES)
    ok = reading.database_ok and reading.broker_ok and not idle
    workers_ok = not idle and not reading.workers.get("failing")
    if not ok:
        response.status_code = 503
        response.headers["Retry-After"] = str(state.health.retry_after())
    if caller is None:
        return {
            "ok": ok,
            "database": {"ok": reading.database_ok},
            "broker": {"ok": reading.broker_ok},
            "workers": {"ok": workers_ok},
        }
    embedder = state.engine.embedder
    configured = {sector: StoreModel.of(e) for sector, e in state.engine.embedders.items()}
    store_models: dict[str, StoreModel] = reading.store_models
    store_model = store_models.get("semantic")
    return {
        "ok": ok,
        "version": __version__,
        "embedding": {
            "provider": embedder.name,
            "model": embedder.model,
            "dimensions": embedder.dim,
            # in-process models are loaded when the gateway starts; HTTP providers are called per request
            "loaded": embedder.name in ("local", "static", "synthetic"),
            "remote": embedder.name in ("openai", "ollama"),
            "mode": state.settings.embed_mode,
            "store": asdict(store_model) if store_model else None,
            # per sector when they differ (advanced mode, or a partial re-embed)
            "sectors": {s: asdict(m) for s, m in configured.items()} if len(set(configured.values())) > 1 else None,
            "store_sectors": {s: asdict(m) for s, m in store_models.items()}
            if len(set(store_models.values())) > 1
            else None,
            "matches_store": bool(store_models) and all(store_models.get(s) == m for s, m in configured.items()),
            "reembed_jobs": reading.reembedding,
        },
        "database": {"ok": reading.database_ok},
        "broker": {"ok": reading.broker_ok},
        "checked_at": reading.checked_at.isoformat(),  # when this was read (MNEMOFLOW_HEALTH_INTERVAL_SECONDS)
        # ready pool processes, per queue, queues none takes, and those whose start-up failed (with why):
        # shared/worker_status.py; the why names servers, so it is the operator's
        "workers": {**reading.workers, "ok": workers_ok, "idle_queues": idle}
        if caller.is_admin
        else {"ok": workers_ok},
    }


@router.get("/sectors")
def sectors(state: StateDep, work: WorkDep, principal: PrincipalDep, user_id: UserId | None = None) -> dict[str, Any]:
    """The five sectors, their configuration, and for the tenant: per-sector count and mean salience, the
    fresh-tier backlog, injection and retrieval-blindness rates of its recent queries, and the memories by decay
    tier and compression state."""
    tenant = principal.tenant(user_id)
    stats, backlog, lifecycle = records.sector_overview(work.session, tenant)
    try:
        retrieval = retrieval_stats.summary(state.redis, tenant, days=state.settings.retrieval_stats_days)
    except redis.RedisError as exc:
        retrieval = {"error": f"Redis unavailable ({public_message(exc)})"}
    return {
        "sectors": list(sector_rules.SECTORS),
        "configs": {
            name: {"decay_lambda": cfg.decay_lambda, "weight": cfg.weight, "description": cfg.description}
            for name, cfg in sector_rules.SECTOR_CONFIGS.items()
        },
        "stats": [
            {
                "sector": name,
                "count": int(stats[name]["count"]) if name in stats else 0,
                "avg_salience": round(float(stats[name]["avg_salience"]), 4) if name in stats else None,
            }
            for name in sector_rules.SECTORS
        ],
        # Vectors stored by batch jobs, searched without the index until the background merge indexes them.
        "index": {"fresh_vectors": backlog},
        # Recall seed: injection rate (healthy 40-55 %) and retrieval blindness (investigate above 20 %).
        "retrieval": retrieval,
        # The tenant's memories by decay tier and compression state (GET /maintenance/stats: the whole store).
        "lifecycle": {
            "tiers": {tier: lifecycle[tier] for tier in ("hot", "warm", "cold")},
            "compression": {state_: lifecycle[state_] for state_ in ("full", "compressed", "fingerprinted")},
        },
    }


@router.get("/jobs/{job_id}", response_model=JobPublic)
def get_job(job_id: uuid.UUID, work: WorkDep, principal: PrincipalDep, user_id: UserId | None = None) -> JobPublic:
    """A job's status, progress (done/total) and error, as recorded in PostgreSQL."""
    if principal.is_admin and not user_id:  # an operator sees every job (store-wide ones belong to no tenant)
        principal.require_admin()
        tenant = None
    else:
        tenant = principal.tenant(user_id)
    job = job_public(work.session, job_id, tenant)
    if job is None:
        raise NotFound(f"job {job_id} not found for user_id {tenant or principal.default_user_id!r}")
    return job


# The operator's: metrics describe every tenant's traffic, and the API description maps the attack surface.
OPERATOR = [Depends(require_operator)]


@router.get("/metrics", include_in_schema=False, dependencies=OPERATOR)
def prometheus_metrics(request: Request) -> Response:
    # Several gateway processes: the lifespan's registry sums every process's files (services/gateway/app.py).
    registry = getattr(request.app.state, "metrics_registry", REGISTRY)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/openapi.json", include_in_schema=False, dependencies=OPERATOR)
async def openapi_document(request: Request) -> JSONResponse:
    return JSONResponse(request.app.openapi())


@router.get("/docs", include_in_schema=False, dependencies=OPERATOR)
async def swagger_docs(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(openapi_url=_openapi_url(request), title=f"{request.app.title} - Swagger UI")


@router.get("/redoc", include_in_schema=False, dependencies=OPERATOR)
async def redoc_docs(request: Request) -> HTMLResponse:
    return get_redoc_html(openapi_url=_openapi_url(request), title=f"{request.app.title} - ReDoc")


def _openapi_url(request: Request) -> str:
    return request.scope.get("root_path", "").rstrip("/") + "/openapi.json"
