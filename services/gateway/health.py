"""What `/health` reports, read in the background: the database, the broker and the workers are checked by one
thread every few seconds, and a call reads the last reading. A probe, or a flood of them, costs no query: 64
anonymous clients calling `/health` each asked the database on the gateway's 2-connection store-wide pool and
slowed every tenant 6-50x.

The stack is ok when the database and the broker answer and every work queue has a process ready to take it; a
reading older than a few intervals (the checking thread is stuck on a server that does not answer) is not ok."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import redis

from shared import worker_status
from shared.db import Database
from shared.jobs import JobKind
from shared.storage import jobs as job_store
from shared.storage.sector_models import current_models

log = logging.getLogger("mnemoflow.gateway")


@dataclass(frozen=True)
class Reading:
    """One check of what the gateway depends on."""

    at: float  # time.monotonic() of the check
    checked_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    database_ok: bool = False
    broker_ok: bool = False
    workers: dict[str, Any] = field(default_factory=dict)  # shared.worker_status.summary
    store_models: dict[str, Any] = field(default_factory=dict)  # sector -> StoreModel
    reembedding: list[str] = field(default_factory=list)  # open re-embed jobs

    def idle_queues(self, queues: Sequence[str]) -> list[str]:
        """The work queues no ready process takes (all of them when the broker could not be read)."""
        ready = self.workers.get("queues", {}) if self.broker_ok else {}
        return [q for q in queues if not ready.get(q)]


class HealthMonitor:
    """Reads the dependencies every `interval` seconds on a thread of its own; `current()` is the last reading."""

    def __init__(self, check: Callable[[], Reading], *, interval: float, stale_after: float | None = None) -> None:
        self._check = check
        self.interval = interval
        self.stale_after = stale_after if stale_after is not None else 3 * interval + 5
        self._last = Reading(at=time.monotonic())  # nothing known yet: not ok
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh(self) -> Reading:
        try:
            reading = self._check()
        except Exception:  # the check must never die: the next one may find the servers back
            log.exception("the health check failed")
            reading = Reading(at=time.monotonic())
        self._last = reading
        return reading

    def start(self) -> None:
        self.refresh()
        self._thread = threading.Thread(target=self._run, name="mnemoflow-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 5)

    def current(self) -> Reading:
        """The last reading; past `stale_after` seconds, one that says nothing answered (the check is stuck)."""
        last = self._last
        if time.monotonic() - last.at > self.stale_after:
            return replace(last, database_ok=False, broker_ok=False)
        return last

    def retry_after(self) -> int:
        return max(1, math.ceil(self.interval))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.refresh()


def check_dependencies(maintenance: Database, client: redis.Redis) -> Reading:
    """One reading: the store's models and re-embed jobs (a database query), a broker ping, the workers' records."""
    database_ok = broker_ok = True
    store_models: dict[str, Any] = {}
    reembedding: list[str] = []
    try:
        with maintenance.session() as session:  # re-embed jobs are the store's, no tenant's
            store_models = current_models(session)
            reembedding = [str(job["id"]) for job in job_store.open_jobs(session, JobKind.REEMBED)]
    except Exception:
        database_ok = False
    workers: dict[str, Any] = {}
    try:
        client.ping()
        workers = worker_status.summary(client)
    except Exception:
        broker_ok = False
    return Reading(
        at=time.monotonic(),
        database_ok=database_ok,
        broker_ok=broker_ok,
        workers=workers,
        store_models=store_models,
        reembedding=reembedding,
    )
