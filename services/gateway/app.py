"""The FastAPI gateway: app factory and lifespan. Reads are answered here; heavy writes go to Celery."""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis
from fastapi import Depends, FastAPI
from prometheus_client import REGISTRY

from services.gateway import metrics
from services.gateway.aftermath import QueryAftermath, write_batch
from services.gateway.errors import install_error_handlers
from services.gateway.health import HealthMonitor, check_dependencies
from services.gateway.middleware import BodySizeLimit, RequestId, RequestMetrics
from services.gateway.ratelimit import RateLimiter
from services.gateway.routers import (
    data,
    documents,
    ingest,
    lgm,
    maintenance,
    memory,
    query,
    system,
    unsupported,
    users,
)
from services.gateway.state import GatewayState
from services.gateway.storable import refuse_unstorable_text
from shared import __version__
from shared.config import OpenAccessRefused, Settings, get_settings
from shared.db import Database, create_db_engine, schema_session
from shared.embedding import EmbeddingProvider
from shared.embedding.cache import CachedEmbedder
from shared.embedding.factory import create_embedder, create_sector_embedders
from shared.embedding.gate import EmbeddingGate, gated
from shared.logs import configure_logging
from shared.memory.engine import MemoryEngine
from shared.monitoring import metrics as shared_metrics
from shared.queueing import make_celery
from shared.retrieval.hot_rows import HotRowCache
from shared.retrieval.service import Retriever
from shared.security.sealing import Sealer, seal_key
from shared.storage.sector_models import ensure_store_model_for
from shared.tenancy import DbRole

log = logging.getLogger("mnemoflow.gateway")


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    configure_logging(settings.log_level)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # In the lifespan, not the factory: uvicorn's supervisor stops on a failed start-up instead of respawning
        try:
            settings.require_keys("the gateway", listens_on=settings.host)  # the launcher checked uvicorn's own
            settings.require_secrets("the gateway", "signing_key", "metrics_tenant_salt")
        except OpenAccessRefused as exc:
            log.error("%s", exc)
            raise
        limits = settings.database_limits
        db = Database(
            create_db_engine(
                settings,
                "mnemoflow.gateway",
                pool_size=limits.gateway_pool_size,
                pool_timeout=limits.gateway_pool_timeout_seconds,
                timeouts=limits.gateway,
            )
        )
        # A query's full-text stage runs on a thread of its own while the query holds its connection. From the
        # same pool, enough concurrent queries held every connection while their full-text stages waited for
        # one: a deadlock until the pool timeout. Its own pool, a connection per thread, never waits.
        threads = settings.retrieval.parallel_threads
        lexical_db = (
            Database(
                create_db_engine(
                    settings, "mnemoflow.gateway.lexical", pool_size=threads, max_overflow=0, timeouts=limits.gateway
                )
            )
            if threads
            else None
        )
        store_wide = Database(
            create_db_engine(
                settings, "mnemoflow.gateway.maintenance", pool_size=2, role=DbRole.MAINTENANCE, timeouts=limits.gateway
            )
        )
        # One gate for the process's in-process models: what its requests embed runs a few at a time.
        bound = settings.embedding_bound
        assert bound.concurrency is not None  # resolved from the cores by the settings
        gate = EmbeddingGate(bound.concurrency, max_waiting=bound.queue, wait_seconds=bound.wait_seconds)
        built = create_embedder(settings)
        behind_gate: dict[int, EmbeddingProvider] = {}  # one wrapper per provider, shared by its sectors
        sector_embedders = {
            sector: behind_gate.setdefault(id(provider), gated(provider, gate))
            for sector, provider in create_sector_embedders(settings, built).items()
        }
        embedder = behind_gate.get(id(built)) or gated(built, gate)
        with schema_session(settings, "mnemoflow.gateway.start") as session:
            ensure_store_model_for(session, sector_embedders, settings)
        redis_client = redis.Redis.from_url(settings.redis_url or "", socket_timeout=2, socket_connect_timeout=2)
        ttl = settings.query_embedding_cache_ttl_seconds
        # The caches' entries are sealed with a key the broker's password does not give.
        signing_key = settings.signing_secret()
        assert signing_key is not None  # require_secrets refused to start without one
        sealer = Sealer(seal_key(signing_key))
        cached: dict[int, EmbeddingProvider] = {}  # one cache wrapper per provider, shared by its sectors
        for provider in sector_embedders.values():
            cached.setdefault(
                id(provider),
                CachedEmbedder(
                    provider,
                    redis_client,
                    ttl_seconds=ttl,
                    sealer=sealer,
                    write_behind=True,
                    on_bad_seal=metrics.bad_seals("query_embedding"),
                )
                if ttl
                else provider,
            )
        row_ttl = settings.hot_row_cache_ttl_seconds
        row_cache = (
            HotRowCache(
                redis_client,
                ttl_seconds=row_ttl,
                sealer=sealer,
                on_lookup=metrics.hot_row_lookups,
                on_bad_seal=metrics.bad_seals("row"),
            )
            if row_ttl
            else None
        )
        aftermath = QueryAftermath(  # writes through the state below, which holds it
            lambda batch: write_batch(app.state.mnemoflow, batch), interval=settings.query_aftermath_interval_ms / 1000
        )
        health = HealthMonitor(
            lambda: check_dependencies(store_wide, redis_client), interval=settings.health_interval_seconds
        )
        app.state.mnemoflow = GatewayState(
            settings=settings,
            db=db,
            maintenance=store_wide,
            engine=MemoryEngine(settings, embedder, sector_embedders=sector_embedders),
            retriever=Retriever(
                settings,
                {sector: cached[id(p)] for sector, p in sector_embedders.items()},
                row_cache=row_cache,
            ),
            redis=redis_client,
            celery=make_celery(settings, "mnemoflow.gateway"),
            aftermath=aftermath,
            limiter=RateLimiter(redis_client, settings.rate_limits),
            health=health,
            lexical_db=lexical_db,
            query_caches=tuple(c for c in cached.values() if isinstance(c, CachedEmbedder)),
        )
        store_counts = (
            metrics.DocumentsCollector(store_wide),
            metrics.TiersCollector(store_wide),
            metrics.FreshCollector(store_wide),
        )
        if shared_metrics.MULTIPROC_ENV in os.environ:
            # One of several processes (services/gateway/serve.py): /metrics sums every process's files.
            app.state.metrics_registry = shared_metrics.registry(*store_counts)
        else:
            for collector in store_counts:
                REGISTRY.register(collector)
            app.state.metrics_registry = REGISTRY
        # What start-up built lives as long as the process: out of the collector's sight, a full collection
        # scans only what requests leave behind (measured: one full collection stalled a query 40 ms).
        health.start()  # a first reading now: the first /health has one
        gc.freeze()
        log.info("gateway ready (version %s)", __version__)
        try:
            yield
        finally:
            health.stop()
            aftermath.close()  # the last queries' bookkeeping, before the connections go
            if app.state.metrics_registry is REGISTRY:
                for collector in store_counts:
                    REGISTRY.unregister(collector)
            db.dispose()
            if lexical_db:
                lexical_db.dispose()
            store_wide.dispose()
            redis_client.close()

    app = FastAPI(
        title="Mnemoflow",
        version=__version__,
        summary="Long-term memory for AI agents: sectored memories, hybrid retrieval, decay.",
        lifespan=lifespan,
        # served by routes of their own (routers/system.py), behind the operator key once keys are configured
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        # every route's first dependency: text the store cannot hold is a 422 naming its field, never a 500
        dependencies=[Depends(refuse_unstorable_text)],
    )
    install_error_handlers(app)
    app.include_router(system.router)
    app.include_router(ingest.router)
    app.include_router(query.router)
    app.include_router(memory.router)
    app.include_router(documents.router)
    app.include_router(maintenance.router)
    app.include_router(users.router)
    app.include_router(lgm.router)
    app.include_router(unsupported.router)
    app.include_router(data.router)

    app.add_middleware(RequestMetrics)
    # An upload may be as large as the ingest limit (plus its multipart framing); base64 in JSON is 4/3 of it.
    upload_limit = settings.ingest_max_bytes + 1024 * 1024
    app.add_middleware(
        BodySizeLimit,
        max_bytes=settings.max_request_bytes,
        path_limits={
            "/memory/ingest/file": upload_limit,
            "/memory/ingest": max(settings.max_request_bytes, settings.ingest_max_bytes * 4 // 3 + 1024 * 1024),
            "/import": settings.import_max_bytes,
        },
    )
    app.add_middleware(RequestId)  # outermost: every answer carries the id its log lines name
    return app
