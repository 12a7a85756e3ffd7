"""What the gateway process holds for its lifetime, and its one way to write: a unit of work that sends its
messages after it commits."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass

import redis
from celery import Celery
from sqlalchemy.orm import Session

from services.gateway import metrics
from services.gateway.aftermath import QueryAftermath
from services.gateway.health import HealthMonitor
from services.gateway.ratelimit import RateLimiter
from shared.config import Settings
from shared.db import Database
from shared.embedding.cache import CachedEmbedder
from shared.jobs import Message
from shared.memory.engine import MemoryEngine
from shared.queueing import send
from shared.retrieval.service import Retriever

log = logging.getLogger("mnemoflow.gateway")


class UnitOfWork:
    """A request's transaction and the messages to send once it has committed (polar's enqueue-after-commit).

    Its session opens at its first use, as whom `acting` names then: a tenant (the app role, that tenant's rows
    only) or the whole store (the maintenance role); used before either is known, it refuses."""

    def __init__(self, open_session: Callable[[], AbstractContextManager[Session]]) -> None:
        self._open = open_session
        self._session: Session | None = None
        self.scope = contextlib.ExitStack()  # the session, once opened: committed when it closes without an error
        self.messages: list[Message] = []

    @property
    def session(self) -> Session:
        if self._session is None:
            self._session = self.scope.enter_context(self._open())
        return self._session

    def enqueue(self, *messages: Message) -> None:
        """Send these when the transaction commits; a rollback drops them."""
        self.messages.extend(messages)


Acting = Callable[[], tuple[str | None, bool]]  # (tenant, store-wide), asked when the session opens


@dataclass
class GatewayState:
    settings: Settings
    db: Database  # the app role: a session sees its tenant's rows
    maintenance: Database  # the maintenance role: store-wide reads and operators' actions
    engine: MemoryEngine  # the write path
    retriever: Retriever  # the read path
    redis: redis.Redis
    celery: Celery
    aftermath: QueryAftermath  # a query's bookkeeping after its response
    limiter: RateLimiter  # the tenants' quotas
    health: HealthMonitor  # what /health reports, read in the background
    lexical_db: Database | None = None  # queries' full-text stages, beside them (a pool of its own)
    query_caches: tuple[CachedEmbedder, ...] = ()  # written behind: flushed by the aftermath thread

    @contextlib.contextmanager
    def unit_of_work(
        self, tenant: str | None = None, *, store_wide: bool = False, acting: Acting | None = None
    ) -> Iterator[UnitOfWork]:
        """One transaction for `tenant` (or the whole store; or whom `acting` says at the first statement):
        committed when the block ends, then its messages are sent; an error rolls back and sends nothing."""
        decide = acting or (lambda: (tenant, store_wide))

        def open_session() -> AbstractContextManager[Session]:
            tenant, store_wide = decide()
            if store_wide:
                return self.maintenance.session()
            if tenant is None:  # a route that reads before asking its principal: a bug, not an empty answer
                raise RuntimeError("a unit of work was used before it was known whom it acts for")
            return self.db.session(tenant)

        work = UnitOfWork(open_session)
        with work.scope:
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
