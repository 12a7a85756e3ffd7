"""The Celery application: queues from shared, one engine per worker process, beat schedule."""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
from dataclasses import astuple
from typing import Any

import redis
from celery import signals

from shared.config import get_settings
from shared.db import Database, create_db_engine
from shared.embedding import EmbeddingProvider
from shared.embedding.factory import create_embedder, create_sector_embedders, embedder_for
from shared.jobs import MergeFresh, PruneAppliedEvents, PruneEmbedLogs, PruneWaypoints, Queue, RunDecayCycle, SweepJobs
from shared.logs import configure_logging
from shared.memory.engine import MemoryEngine
from shared.queueing import make_celery
from shared.storage.sector_models import StoreModel, ensure_store_model_for

settings = get_settings()
app = make_celery(settings, "mnemoflow.worker")
app.conf.beat_schedule = {
    "sweep-stalled-jobs": {"task": SweepJobs.task, "schedule": settings.sweep_interval_seconds},
    "merge-fresh-vectors": {"task": MergeFresh.task, "schedule": 60.0},
    "prune-embed-logs": {"task": PruneEmbedLogs.task, "schedule": 86400.0},
    "prune-applied-events": {"task": PruneAppliedEvents.task, "schedule": 86400.0},
    "prune-waypoints": {"task": PruneWaypoints.task, "schedule": settings.waypoints.prune_interval_days * 86400},
    "decay-cycle": {"task": RunDecayCycle.task, "schedule": settings.decay.interval_minutes * 60},
}
app.conf.include = ["workers.tasks"]

log = logging.getLogger("mnemoflow.worker")


class WorkerContext:
    """Per-process resources, built in worker_process_init (never at import, never shared across a fork)."""

    db: Database | None = None
    engine: MemoryEngine | None = None
    redis: redis.Redis | None = None
    targets: dict[StoreModel, EmbeddingProvider] = {}  # re-embed targets, loaded on first use

    @classmethod
    def open(cls) -> None:
        if cls.db is None:
            cls.db = Database(create_db_engine(settings, "mnemoflow.worker", pool_size=2))
            embedder = create_embedder(settings)
            sector_embedders = create_sector_embedders(settings, embedder)
            with cls.db.session() as session:
                ensure_store_model_for(session, sector_embedders, settings)
            cls.engine = MemoryEngine(settings, embedder, sector_embedders=sector_embedders)
            cls.redis = redis.Redis.from_url(settings.redis_url or "", socket_timeout=5)

    @classmethod
    def close(cls) -> None:
        if cls.db is not None:
            cls.db.dispose()
        if cls.redis is not None:
            cls.redis.close()
        cls.db = None
        cls.engine = None
        cls.redis = None
        cls.targets = {}


@signals.setup_logging.connect
def _logging(**_: Any) -> None:
    configure_logging(settings.log_level)


@signals.worker_process_init.connect
def _process_init(**_: Any) -> None:
    _allow_sandbox_children()
    WorkerContext.open()
    if _consumes(Queue.INGEST):
        threading.Thread(target=_warm_sandbox, name="sandbox-warm-up", daemon=True).start()


def _consumes(queue: str) -> bool:
    """Whether this worker was started on `queue` (every queue when no -Q was given)."""
    selected = app.amqp.queues.consume_from
    return not selected or queue in selected


def _warm_sandbox() -> None:
    from shared.ingest.sandbox import warm_up

    try:
        warm_up()
    except Exception as exc:  # the first document will start it instead, and report what fails
        log.warning("could not start the ingest sandbox ahead of time: %s", exc)


def _allow_sandbox_children() -> None:
    """Let a prefork pool process start the ingest sandbox's children (shared/ingest/sandbox.py).

    billiard marks its pool processes daemonic in the standard library's process record, and multiprocessing
    refuses children to a daemonic process; the sandbox kills and reaps its child itself, so none outlives
    the task, which is what the rule protects against. billiard also leaves its own authkey type there,
    which the standard library's forkserver cannot pickle: a fresh key of the standard type replaces it.
    """
    process = multiprocessing.current_process()
    process._config["daemon"] = False  # type: ignore[attr-defined]
    process._config["authkey"] = multiprocessing.process.AuthenticationString(os.urandom(32))  # type: ignore[attr-defined]


@signals.worker_process_shutdown.connect
def _process_shutdown(**_: Any) -> None:
    WorkerContext.close()


def redis_client() -> redis.Redis:
    WorkerContext.open()
    assert WorkerContext.redis is not None
    return WorkerContext.redis


def context() -> tuple[Database, MemoryEngine]:
    """The process's database and engine (opened lazily for solo/threads pools and beat)."""
    WorkerContext.open()
    assert WorkerContext.db is not None and WorkerContext.engine is not None
    return WorkerContext.db, WorkerContext.engine


def target_embedder(target: StoreModel) -> EmbeddingProvider:
    """The provider a re-embed job asks for, built from this worker's settings (keys, URLs, model paths)."""
    embedder = WorkerContext.targets.get(target)
    if embedder is None:
        _, engine = context()
        mine = [e for e in engine.embedders.values() if (e.name, e.model, e.dim) == astuple(target)]
        embedder = mine[0] if mine else embedder_for(settings, target.provider, dim=target.dim)
        if (embedder.model, embedder.dim) != (target.model, target.dim):
            raise ValueError(
                f"this worker's {target.provider} provider makes model {embedder.model!r} ({embedder.dim} dimensions), "
                f"but the re-embed job wants {target.model!r} ({target.dim}); configure the workers like the gateway"
            )
        WorkerContext.targets[target] = embedder
    return embedder
