"""What the gateway process holds for its lifetime, and its one way to write: a unit of work that sends its
messages after it commits."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

import redis
from celery import Celery
from sqlalchemy.orm import Session

from services.gateway import metrics
from services.gateway.aftermath import QueryAftermath
from services.gateway.ratelimit import RateLimiter
from shared.config import Settings
from shared.db import Database
from shared.jobs import Message
from shared.memory.engine import MemoryEngine
from shared.queueing import send
from shared.retrieval.service import Retriever

log = logging.getLogger("mnemoflow.gateway")


@dataclass
class UnitOfWork:
    """A request's transaction and the messages to send once it has committed (polar's enqueue-after-commit)."""

    session: Session
    messages: list[Message] = field(default_factory=list)

    def enqueue(self, *messages: Message) -> None:
        """Send these when the transaction commits; a rollback drops them."""
        self.messages.extend(messages)


@dataclass
class GatewayState:
    settings: Settings
    db: Database
    engine: MemoryEngine  # the write path
    retriever: Retriever  # the read path
    redis: redis.Redis
    celery: Celery
    aftermath: QueryAftermath  # a query's bookkeeping after its response
    limiter: RateLimiter  # the tenants' quotas
    lexical_db: Database | None = None  # queries' full-text stages, beside them (a pool of its own)

    @contextlib.contextmanager
    def unit_of_work(self) -> Iterator[UnitOfWork]:
        """One transaction: committed when the block ends, then its messages are sent; an error rolls back and
        sends nothing."""
        with self.db.session() as session:
            work = UnitOfWork(session)
            yield work
        self.enqueue(*work.messages)

    def enqueue(self, *messages: Message) -> int:
        """Send messages whose work is committed; how many went. A broker outage is logged and counted, never
        fatal: the job's rows are the record, and the sweeper re-sends work whose message was lost. After the
        first failure the rest are not tried (each would wait for the broker's timeout, for nothing)."""
        for sent, message in enumerate(messages):
            try:
                send(self.celery, message)
            except Exception as exc:
                unsent = len(messages) - sent
                metrics.ENQUEUE_FAILURES.inc(unsent)
                log.warning(
                    "could not enqueue %s (%s); %d message(s) left for the sweeper to re-send if they are job work",
                    message.task,
                    exc,
                    unsent,
                )
                return sent
        return len(messages)
