"""The workers' Prometheus metrics: what every task did and how long it took, what the chunks and documents
amounted to, and the broker's queue depths, served by each worker's main process on MNEMOFLOW_WORKER_METRICS_PORT.

Every pool process records into files of its own and the main process sums them when scraped
(shared/monitoring/metrics.py).
No label names a tenant. Metrics are declared with labels only, so no value exists before `start` has chosen the
multiprocess directory: the first one is made by a task, in a pool process, after it.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from billiard.exceptions import WorkerLostError
from celery import Celery, Task, signals
from celery.exceptions import TimeLimitExceeded
from prometheus_client import Counter, Histogram

from shared.config import Settings
from shared.jobs import ALL_QUEUES, DEFAULT_QUEUE
from shared.monitoring import metrics as shared_metrics

log = logging.getLogger("mnemoflow.worker")

# From a few milliseconds (a reinforcement) to half an hour (a long recording's transcription).
TASK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)

TASKS = Counter(
    "mnemoflow_worker_tasks",
    "Tasks run by outcome: succeeded, failed (raised), retried (to run again later), time_limit (killed at its hard "
    "time limit), worker_lost (its process died)",
    ["task", "queue", "outcome"],
)
TASK_SECONDS = Histogram(
    "mnemoflow_worker_task_seconds",
    "How long a task ran, whatever its outcome (killed tasks are not timed)",
    ["task", "queue"],
    buckets=TASK_BUCKETS,
)
CHUNKS = Counter(
    "mnemoflow_worker_chunks",
    "Job chunks by status: done (stored), failed (for good), skipped (done already or claimed by another worker), "
    "held (another worker holds it)",
    ["queue", "status"],
)
CHUNK_ITEMS = Counter(
    "mnemoflow_worker_chunk_items",
    "Items of the chunks stored: created (a new memory) or duplicate (the same content was there already)",
    ["queue", "outcome"],
)
DOCUMENTS = Counter(
    "mnemoflow_worker_documents",
    "Ingest job steps by outcome: planned (extracted and chunked), finished, duplicate, failed, retry, skipped",
    ["format", "outcome"],
)
DOCUMENT_STAGE_SECONDS = Histogram(
    "mnemoflow_worker_document_stage_seconds",
    "Time of each stage of a document's extraction (fetch, read, extract, chunk, classify)",
    ["stage", "format"],
    buckets=TASK_BUCKETS,
)
REFUSED = Counter(
    "mnemoflow_worker_refused_messages",
    "Task messages refused before their task ran, by reason: unsigned, bad signature (forged, or signed with "
    "another key), or no signing key on this worker",
    ["task", "reason"],
)

_started: dict[str, float] = {}  # task id -> when it started, in the process running it
_endpoint: shared_metrics.Endpoint | None = None
_temporary: Path | None = None  # the directory `start` made itself, removed when the worker stops


def queue_of(task: Task) -> str:
    """The queue the running task's message came from (its routing key), or its task's default queue."""
    delivery = getattr(task.request, "delivery_info", None) or {}
    return str(delivery.get("routing_key") or DEFAULT_QUEUE.get(task.name) or "unknown")


def start(app: Celery, settings: Settings) -> shared_metrics.Endpoint | None:
    """In the worker's main process, before the pool forks: the multiprocess directory, and the endpoint on
    `settings.worker_metrics_port` (none when it is unset or 0; a port in use is logged, the worker runs on)."""
    global _endpoint, _temporary
    port = settings.worker_metrics_port
    if not port:
        return None
    directory = settings.worker_metrics_dir
    if directory is None:
        directory = _temporary = Path(tempfile.mkdtemp(prefix="mnemoflow-worker-metrics-"))
    shared_metrics.use_directory(directory)
    options = app.conf.broker_transport_options or {}
    depths = shared_metrics.QueueDepths(
        lambda: redis.Redis.from_url(settings.redis_url or "", socket_timeout=2, socket_connect_timeout=2),
        ALL_QUEUES,
        options,
    )
    try:
        _endpoint = shared_metrics.serve(shared_metrics.registry(depths), settings.worker_metrics_host, port)
    except OSError as exc:
        log.error(
            "worker metrics: cannot listen on %s:%s (%s); running without them", settings.worker_metrics_host, port, exc
        )
        return None
    log.info("worker metrics on http://%s:%s/metrics (files in %s)", settings.worker_metrics_host, port, directory)
    return _endpoint


@signals.worker_process_init.connect
def _release_port(**_: Any) -> None:
    if _endpoint is not None:
        _endpoint.release_in_child()


@signals.worker_shutdown.connect
def _stop(**_: Any) -> None:
    if _endpoint is not None:
        with contextlib.suppress(Exception):
            _endpoint.close()
    if _temporary is not None:
        shutil.rmtree(_temporary, ignore_errors=True)


@signals.task_prerun.connect
def _task_started(task_id: str, **_: Any) -> None:
    _started[task_id] = time.perf_counter()


_OUTCOMES = {"SUCCESS": "succeeded", "FAILURE": "failed", "RETRY": "retried", "REJECTED": "rejected"}


@signals.task_postrun.connect
def _task_ended(sender: Task, task_id: str, state: str | None = None, **_: Any) -> None:
    queue = queue_of(sender)
    started = _started.pop(task_id, None)
    if started is not None:
        TASK_SECONDS.labels(sender.name, queue).observe(time.perf_counter() - started)
    TASKS.labels(sender.name, queue, _OUTCOMES.get(state or "", (state or "unknown").lower())).inc()


@signals.task_failure.connect
def _task_killed(sender: Task, exception: BaseException | None = None, **_: Any) -> None:
    """A task whose process was killed (hard time limit) or died: reported by the main process, no postrun."""
    if isinstance(exception, TimeLimitExceeded):
        TASKS.labels(sender.name, queue_of(sender), "time_limit").inc()
    elif isinstance(exception, WorkerLostError):
        TASKS.labels(sender.name, queue_of(sender), "worker_lost").inc()


def chunk_done(queue: str, status: str, created: int = 0, duplicates: int = 0) -> None:
    """Count a chunk task's outcome, and its items when it stored them."""
    CHUNKS.labels(queue, status).inc()
    if created:
        CHUNK_ITEMS.labels(queue, "created").inc(created)
    if duplicates:
        CHUNK_ITEMS.labels(queue, "duplicate").inc(duplicates)


def document_step(fmt: str | None, outcome: str, stages_ms: dict[str, int]) -> None:
    """Count an ingest step's outcome and time its stages."""
    label = fmt or "unknown"
    DOCUMENTS.labels(label, outcome).inc()
    for stage, ms in stages_ms.items():
        DOCUMENT_STAGE_SECONDS.labels(stage.removesuffix("_ms"), label).observe(ms / 1000)
