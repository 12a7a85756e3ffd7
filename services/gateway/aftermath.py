"""A query's bookkeeping after its response, gathered and done in batches by one thread per gateway.

Each query leaves a record: its active-query token, its outcome for the tenant's stats, its reinforcement
event and the model calls it made. Every `interval` the thread writes all records that came in: one Redis
round trip for the tokens, one for the stats and one for the query embeddings new to the cache, one Celery
message carrying every reinforcement event, one transaction for the embed log lines. Done per query instead,
this work cost the gateway two thirds as much CPU as answering the query itself, and ran beside the next query.
A crash loses at most one interval of it: the active-query tokens expire on their own, reinforcement, the log
and the cache were best-effort already.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.gateway import metrics
from shared.embedding.calls import EmbedCall
from shared.jobs import ReinforceBatch, ReinforceHits
from shared.lifecycle.activity import queries_finished
from shared.retrieval import stats as retrieval_stats
from shared.storage import embed_logs as embed_log_store

log = logging.getLogger("mnemoflow.gateway")


@dataclass(frozen=True)
class QueryRecord:
    active: str | None  # the active-query token (None: Redis could not count it)
    user_id: str
    result: str  # the retrieval-stats outcome
    calls: Sequence[EmbedCall] = ()  # the model calls the query made
    reinforcement: ReinforceHits | None = None  # its after-effects, when there are any


@dataclass
class Batch:
    """What a flush writes, from the records gathered since the last one."""

    tokens: list[str | None] = field(default_factory=list)
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)
    events: list[ReinforceHits] = field(default_factory=list)
    calls: list[EmbedCall] = field(default_factory=list)

    @classmethod
    def of(cls, records: Sequence[QueryRecord]) -> Batch:
        batch = cls()
        for record in records:
            batch.tokens.append(record.active)
            batch.outcomes[(record.user_id, record.result)] += 1
            if record.reinforcement is not None:
                batch.events.append(record.reinforcement)
            batch.calls.extend(record.calls)
        return batch


class QueryAftermath:
    """Gathers `QueryRecord`s; a daemon thread hands them to `write` as one `Batch` every `interval` seconds
    (sooner when `max_records` are waiting). `close()` writes what is left."""

    def __init__(self, write: Callable[[Batch], None], *, interval: float, max_records: int = 1000) -> None:
        self._write = write
        self._interval = interval
        self._max_records = max_records
        self._records: list[QueryRecord] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="mnemoflow-aftermath", daemon=True)
        self._thread.start()

    def add(self, record: QueryRecord) -> None:
        with self._lock:
            self._records.append(record)
            full = len(self._records) >= self._max_records
        if full or self._closed:
            self._wake.set()

    def flush(self) -> int:
        """Write what has been gathered now; returns how many records that was."""
        with self._lock:
            records, self._records = self._records, []
        if records:
            try:
                self._write(Batch.of(records))
            except Exception:  # one failed batch must not stop the thread: the next ones still go out
                metrics.AFTERMATH_RECORDS.labels(outcome="failed").inc(len(records))
                log.exception("could not write the bookkeeping of %d queries", len(records))
            else:
                metrics.AFTERMATH_RECORDS.labels(outcome="written").inc(len(records))
        return len(records)

    def close(self, timeout: float = 10.0) -> None:
        self._closed = True
        self._wake.set()
        self._thread.join(timeout)
        self.flush()

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self._interval)
            self._wake.clear()
            self.flush()


def write_batch(state: Any, batch: Batch) -> None:
    """The gateway's writer: each step on its own, so an outage of one costs that step only."""
    queries_finished(state.redis, batch.tokens)
    for cache in state.query_caches:  # the query embeddings computed since the last flush
        cache.flush()
    retrieval_stats.record_many(state.redis, batch.outcomes)
    if batch.events:
        state.enqueue(ReinforceBatch(events=batch.events))
    if batch.calls:
        try:
            with state.db.session() as session:
                # a query's log line is not worth a disk wait: the commit skips the WAL flush
                embed_log_store.log_embeddings(session, batch.calls, purpose="query", synchronous=False)
        except Exception as exc:
            log.warning("could not log %d query embedding calls: %s", len(batch.calls), exc)
