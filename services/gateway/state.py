"""What the gateway process holds for its lifetime: engine, embedder, Redis, the Celery producer."""

from __future__ import annotations

from dataclasses import dataclass

import redis
from celery import Celery

from services.gateway.aftermath import QueryAftermath
from shared.config import Settings
from shared.db import Database
from shared.memory_service import MemoryEngine


@dataclass
class GatewayState:
    settings: Settings
    db: Database
    engine: MemoryEngine
    redis: redis.Redis
    celery: Celery
    aftermath: QueryAftermath  # a query's bookkeeping after its response
