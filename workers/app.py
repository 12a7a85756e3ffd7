"""The Celery application: queues from shared, one engine per worker process, beat schedule."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from dataclasses import astuple
from typing import Any

import redis
from celery import signals

from shared import worker_status
from shared.config import OpenAccessRefused, get_settings
from shared.db import Database, create_db_engine, schema_session
from shared.embedding import EmbeddingProvider
from shared.embedding.factory import create_embedder, create_sector_embedders, embedder_for
from shared.errors import MnemoflowError
from shared.jobs import (
    ALL_QUEUES,
    MergeFresh,
    PruneAppliedEvents,
    PruneEmbedLogs,
    PruneWaypoints,
    Queue,
    RunDecayCycle,
    SweepJobs,
)
from shared.logs import configure_logging
from shared.memory.engine import MemoryEngine
from shared.queueing import make_celery
from shared.storage import priority
from shared.storage.sector_models import StoreModel, ensure_store_model_for
from shared.tenancy import DbRole
from workers import blas, metrics

settings = get_settings()
# Checked at import, so every process built on this app (worker, beat, Flower) refuses to start open.
settings.require_keys("a Celery process (worker, beat or Flower)")
app = make_celery(settings, "mnemoflow.worker", task_cls="workers.signing:VerifiedTask")
app.conf.beat_schedule = {
    "sweep-stalled-jobs": {"task": SweepJobs.task, "schedule": settings.sweep_interval_seconds},
    "merge-fresh-vectors": {"task": MergeFresh.task, "schedule": 60.0},
    "prune-embed-logs": {"task": PruneEmbedLogs.task, "schedule": 86400.0},
    "prune-applied-events": {"task": PruneAppliedEvents.task, "schedule": 86400.0},
    "prune-waypoints": {"task": PruneWaypoints.task, "schedule": settings.waypoints.prune_interval_days * 86400},
    "decay-cycle": {"task": RunDecayCycle.task, "schedule": settings.decay.interval_minutes * 60},
}
app.conf.include = ["workers.tasks", "workers.data_tasks"]

log = logging.getLogger("mnemoflow.worker")


class WorkerContext:
    """Per-process resources, built in worker_process_init (never at import, never shared across a fork)."""

    db: Database | None = None  # the app role: a tenant's task binds it to the tenant its message names
    maintenance: Database | None = None  # the maintenance role: store-wide tasks (decay, merge, re-embed, sweep)
    engine: MemoryEngine | None = None
    redis: redis.Redis | None = None
    targets: dict[StoreModel, EmbeddingProvider] = {}  # re-embed targets, loaded on first use

    @classmethod
    def open(cls) -> None:
        """All or nothing: a failure leaves the context closed, never half open."""
        if cls.engine is not None:
            return
        nice = settings.worker_backend_nice
        db = Database(create_db_engine(settings, "mnemoflow.worker", pool_size=2, backend_nice=nice))
        maintenance = Database(
            create_db_engine(
                settings,
                "mnemoflow.worker.maintenance",
                pool_size=2,
                max_overflow=max(2, settings.merge_connections - 1),  # a merge run: its lock's + one per lane
                role=DbRole.MAINTENANCE,
                backend_nice=max(nice, settings.maintenance_backend_nice),
            )
        )
        try:
            embedder = create_embedder(settings)
            sector_embedders = create_sector_embedders(settings, embedder)
            with schema_session(settings, "mnemoflow.worker.start") as session:
                ensure_store_model_for(session, sector_embedders, settings)
            engine = MemoryEngine(settings, embedder, sector_embedders=sector_embedders)
        except BaseException:
            db.dispose()
            maintenance.dispose()
            raise
        cls.db, cls.maintenance, cls.engine = db, maintenance, engine
        cls.redis = redis.Redis.from_url(settings.redis_url or "", socket_timeout=5)

    @classmethod
    def close(cls) -> None:
        if cls.db is not None:
            cls.db.dispose()
        if cls.maintenance is not None:
            cls.maintenance.dispose()
        if cls.redis is not None:
            cls.redis.close()
        cls.db = None
        cls.maintenance = None
        cls.engine = None
        cls.redis = None
        cls.targets = {}


@signals.setup_logging.connect
def _logging(**_: Any) -> None:
    configure_logging(settings.log_level)


@signals.worker_init.connect
def _worker_init(**_: Any) -> None:
    """The main process, before its pool forks: wait for the database (it may still be starting), or exit to be
    restarted, saying why. Pool processes then open their own connections. It takes `MNEMOFLOW_WORKER_NICE`
    first, so the pool processes it forks (and their parsers) are born with it."""
    _require_signing_key("a worker")
    priority.lower_own(settings.worker_nice)
    db = Database(create_db_engine(settings, "mnemoflow.worker.start", pool_size=1))
    try:
        _retrying("reach the database", lambda: db.engine.connect().close())
    except Exception as exc:
        raise SystemExit(
            f"worker: cannot reach the database after {settings.worker_start_seconds:.0f}s: {exc}"
        ) from exc
    finally:
        db.dispose()


@signals.beat_init.connect
def _beat_init(**_: Any) -> None:
    """Beat sends store-wide work on a schedule: unsigned, every worker would refuse it."""
    _require_signing_key("beat")


def _require_signing_key(process: str) -> None:
    """Workers verify and beat signs with the signing key; Flower, which sends nothing, starts without one."""
    try:
        settings.require_secrets(process, "signing_key")
    except OpenAccessRefused as exc:
        raise SystemExit(f"{process}: {exc}") from exc


@signals.worker_init.connect
def _metrics(**_: Any) -> None:
    """The main process, before its pool forks: its Prometheus endpoint, summing every pool process's metrics."""
    metrics.start(app, settings)


@signals.worker_process_init.connect
def _process_init(**_: Any) -> None:
    """A pool process: open its database, models and Redis, retrying a while (a database not ready yet); if it
    cannot, it says so for /health and exits, and the pool starts another. It never serves half-initialised: on the
    ingest queue its parser sandbox is started too before it takes a task.
    Its BLAS runs on one thread (workers/blas.py): the pool already has a process per core."""
    blas.one_thread()
    _allow_sandbox_children()
    try:
        _retrying("start", WorkerContext.open)
    except Exception as exc:
        log.critical("worker process %s cannot start, exiting to be replaced: %s", os.getpid(), exc)
        with contextlib.suppress(Exception):
            worker_status.report_failing(
                redis.Redis.from_url(settings.redis_url or "", socket_timeout=2), _queues(), str(exc)
            )
        os._exit(3)
    if _consumes(Queue.INGEST):
        # before this process takes a task or says it is ready: the first document is then as fast as the next
        # (started beside the pool, the forkserver's imports fell inside the first document: 3.4 s against 0.05)
        _warm_sandbox()
    threading.Thread(target=_report_ready, name="worker-status", daemon=True).start()


def _retrying(what: str, step: Callable[[], object]) -> None:
    """Run `step` until it succeeds or `worker_start_seconds` pass, backing off; a store that refuses this
    worker's models (a Conflict) is not retried: waiting will not change it."""
    deadline = time.monotonic() + settings.worker_start_seconds
    delay = 0.5
    while True:
        try:
            step()
            return
        except MnemoflowError:
            WorkerContext.close()
            raise
        except Exception as exc:
            WorkerContext.close()
            if time.monotonic() + delay > deadline:
                raise
            log.warning("worker process %s could not %s (%s); trying again in %.1fs", os.getpid(), what, exc, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def _report_ready() -> None:
    """Tell /health this process can work, every few seconds, for as long as it lives."""
    while True:
        try:
            worker_status.report_ready(redis_client(), _queues())
        except Exception as exc:  # Redis away: the broker is too, and /health says so already
            log.debug("could not report readiness: %s", exc)
        time.sleep(worker_status.BEAT)


def _queues() -> list[str]:
    selected = app.amqp.queues.consume_from
    return sorted(selected) if selected else list(ALL_QUEUES)


def _consumes(queue: str) -> bool:
    """Whether this worker was started on `queue` (every queue when no -Q was given)."""
    return queue in _queues()


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
    if WorkerContext.redis is not None:
        with contextlib.suppress(Exception):
            worker_status.clear(WorkerContext.redis)
    WorkerContext.close()


def redis_client() -> redis.Redis:
    WorkerContext.open()
    if WorkerContext.redis is None:
        raise RuntimeError("this worker process has no Redis client: its start-up failed (see its log)")
    return WorkerContext.redis


def context() -> tuple[Database, MemoryEngine]:
    """The process's database and engine (opened lazily for solo/threads pools and beat)."""
    WorkerContext.open()
    if WorkerContext.db is None or WorkerContext.engine is None:
        raise RuntimeError("this worker process has no database: its start-up failed (see its log)")
    return WorkerContext.db, WorkerContext.engine


def store_wide() -> Database:
    """The process's maintenance-role database, for store-wide tasks (opened lazily like `context`)."""
    WorkerContext.open()
    if WorkerContext.maintenance is None:
        raise RuntimeError("this worker process has no database: its start-up failed (see its log)")
    return WorkerContext.maintenance


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
