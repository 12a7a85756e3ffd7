"""What the gateway process holds for its lifetime: engine, embedder, Redis, the Celery producer."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import redis
from celery import Celery

from services.gateway import metrics
from services.gateway.aftermath import QueryAftermath
from shared.config import Settings
from shared.db import Database
from shared.memory_service import MemoryEngine

log = logging.getLogger("mnemoflow.gateway")


@dataclass
class GatewayState:
    settings: Settings
    db: Database
    engine: MemoryEngine
    redis: redis.Redis
    celery: Celery
    aftermath: QueryAftermath  # a query's bookkeeping after its response

    def send(self, name: str, *, kwargs: dict[str, Any], queue: str | None = None) -> None:
        """Send a task by name; a broker outage is logged, never fatal (jobs are re-sent by the sweeper)."""
        try:
            self.celery.send_task(name, kwargs=kwargs, queue=queue)
        except Exception as exc:
            metrics.ENQUEUE_FAILURES.inc()
            log.warning("could not enqueue %s (%s); it will be retried by the sweeper if it is job work", name, exc)
