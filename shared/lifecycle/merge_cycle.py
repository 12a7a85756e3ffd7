"""The merge cycle: the fresh tier moved into the HNSW indexes and its memories linked (settled).

Bulk writes land their vectors unindexed (COPY speed, searchable at once); this cycle indexes them in
batches, one merge run at a time store-wide (an advisory lock) on `merge_connections` connections at once (an
HNSW insert is one backend's CPU: a server with cores to spare drains a burst on as many), within a time budget,
and yields to ingestion:
HNSW inserts cost the same CPU the embedding model needs, so while the embed queues hold work and the fresh tier
is still small, the merge waits (the last chunk of a burst asks for the next merge; beat runs it every minute).
Each run also analyses the read path's tables whose rows changed a lot (shared/storage/planner_stats.py).
It runs beside the decay cycle on the maintenance queue.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import redis
from sqlalchemy.orm import Session

from shared.backpressure import PRIORITY_STEPS
from shared.config import Settings
from shared.db import Database, is_deadlock
from shared.jobs import embed_queue
from shared.memory.engine import MemoryEngine
from shared.memory.sectors import SECTORS
from shared.queueing import broker_keys
from shared.storage import anchors, locks, planner_stats
from shared.storage import vectors as vector_store
from shared.storage.locks import Lock

log = logging.getLogger("mnemoflow.worker")

ANALYZE_EVERY = 5000  # merged vectors between statistics refreshes
EMBED_QUEUES = tuple(embed_queue(sector) for sector in SECTORS)


@dataclass(frozen=True)
class MergeOutcome:
    merged: int = 0  # vectors moved into the index
    links: int = 0  # waypoints made to the merged memories' best matches
    skipped: bool = False  # another merge held the lock
    unfinished: bool = False  # the time budget ran out with work left
    yielded: bool = False  # ingestion had priority: stopped with work left (the worker asks again shortly)


def embed_backlog(client: redis.Redis) -> int:
    """Messages waiting on the embed.<sector> queues (Redis lists named after the queues, one per priority)."""
    try:
        with client.pipeline(transaction=False) as pipe:
            for queue in EMBED_QUEUES:
                for key in broker_keys(queue, {"priority_steps": PRIORITY_STEPS}):
                    pipe.llen(key)
            return sum(int(n) for n in pipe.execute())
    except Exception as exc:  # not Redis, or unreachable: never block the merge on it
        log.debug("cannot read the embed queues' length: %s", exc)
        return 0


class MergeCycle:
    """One merge run against one store; `embed_backlog` says how much embedding work is waiting."""

    def __init__(
        self, db: Database, engine: MemoryEngine, settings: Settings, *, embed_backlog: Callable[[], int]
    ) -> None:
        self.db = db
        self.engine = engine
        self.settings = settings
        self.embed_backlog = embed_backlog

    def ingest_has_priority(self, session: Session) -> bool:
        """Whether the merge should yield: embedding work is waiting and the fresh tier is still small enough."""
        cap = self.settings.merge_yield_max_fresh
        return cap > 0 and self.embed_backlog() > 0 and vector_store.fresh_vector_count(session, limit=cap) < cap

    def run(self) -> MergeOutcome:
        """Move fresh vectors into the HNSW indexes and link their memories, batch by batch, on
        `merge_connections` connections at once (each takes batches of its own)."""
        started = time.monotonic()
        with self.db.engine.connect() as lock_conn:
            if not locks.try_hold(lock_conn, Lock.MERGE):
                return MergeOutcome(skipped=True)
            try:
                try:
                    self._anchor()
                except Exception as exc:  # anchors only speed queries up: never keep the tier from its merge
                    log.warning("[merge] the fresh tier's anchors could not be made or assigned: %s", exc, exc_info=exc)
                try:
                    self._analyse()
                except Exception as exc:  # statistics only steer plans: never keep the tier from its merge
                    log.warning("[merge] the read path's statistics could not be refreshed: %s", exc, exc_info=exc)
                lanes = self.settings.merge_connections
                if lanes == 1:
                    outcomes = [self._lane(started, lead=True)]
                else:
                    with ThreadPoolExecutor(lanes, thread_name_prefix="mnemoflow-merge") as pool:
                        futures = [pool.submit(self._lane, started, lead=i == 0) for i in range(lanes)]
                        outcomes = [f.result() for f in futures]
            finally:
                locks.release(lock_conn, Lock.MERGE)
        merged = sum(o.merged for o in outcomes)
        links = sum(o.links for o in outcomes)
        if merged:
            took = time.monotonic() - started
            log.info(
                "[merge] indexed %d vectors, %d waypoints in %.1fs (%.0f/s); %s still waiting",
                merged,
                links,
                took,
                merged / took if took else 0.0,
                self._waiting(),
            )
        return MergeOutcome(
            merged,
            links,
            unfinished=any(o.unfinished for o in outcomes),
            yielded=any(o.yielded for o in outcomes),
        )

    def _anchor(self) -> None:
        """Anchors for the fresh codes of any model that has grown crowded, or new ones where the crowded fresh tier
        has drifted from those it had; then the codes not filed under them assigned (shared/storage/anchors.py):
        from then on a crowded tenant's queries read a fraction of its codes. Before the lanes, whether or not
        ingestion has priority: a burst is when its tenant's queries need them."""
        limits = self.settings.database_limits.maintenance
        with self.db.session(timeouts=limits) as session:
            due: list[tuple[str, int, anchors.Drift | None]] = [
                (model, dim, None) for model, dim in anchors.untrained(session)
            ]
            due += [(d.model, d.dim, d) for d in anchors.drifted(session)]
        for model, dim, drift in due:
            started = time.monotonic()
            with self.db.session(timeouts=limits) as session:
                trained = anchors.train(session, model, dim)
            if not trained:
                continue
            took = time.monotonic() - started
            if drift is None:
                log.info(
                    "[merge] %d anchors for %s at %d dimensions, from %d fresh vectors in %.1fs",
                    anchors.ANCHORS,
                    model,
                    dim,
                    trained.vectors,
                    took,
                )
            else:
                log.info(
                    "[merge] %d anchors for %s at %d dimensions trained again, from %d fresh vectors in %.1fs: "
                    "the %d fresh codes had drifted from the last ones' training sample (total variation %.2f, "
                    "past %.2f); their codes are read whole until filed again",
                    anchors.ANCHORS,
                    model,
                    dim,
                    trained.vectors,
                    took,
                    drift.codes,
                    drift.drift,
                    anchors.DRIFT,
                )
        filed = 0
        while True:
            with self.db.session(timeouts=limits) as session:
                assigned = anchors.assign_waiting(session)
            if assigned:
                log.info("[merge] %d fresh codes assigned to their anchors", assigned)
            filed += assigned
            if assigned < anchors.ASSIGN_BATCH:
                break
        if filed >= anchors.TIDY_AFTER:
            started = time.monotonic()
            with self.db.engine.connect() as connection:
                anchors.tidy(connection)
            log.info(
                "[merge] fresh codes vacuumed and analysed after %d were filed, in %.1fs",
                filed,
                time.monotonic() - started,
            )

    def _analyse(self) -> None:
        """`ANALYZE` of the read path's tables whose rows changed a lot since their last one (shared/storage/
        planner_stats.py): during a burst autovacuum comes by too late, and the burst's queries were planned on the
        statistics of empty tables. Before the lanes, whether or not ingestion has priority."""
        started = time.monotonic()
        with self.db.session(timeouts=self.settings.database_limits.maintenance) as session:
            analysed = planner_stats.refresh(session)
        if analysed:
            log.info(
                "[merge] statistics refreshed in %.1fs: %s",
                time.monotonic() - started,
                ", ".join(f"{table} ({changed} rows changed)" for table, changed in analysed),
            )

    def _waiting(self) -> str:
        """How many vectors still wait for the merge, for the log ("?" if they cannot be counted: the run's work is
        committed either way)."""
        try:
            with self.db.session() as session:
                return str(sum(vector_store.fresh_by_sector(session).values()))
        except Exception as exc:
            log.debug("cannot count the fresh tier: %s", exc)
            return "?"

    def _lane(self, started: float, *, lead: bool) -> MergeOutcome:
        """One connection's share of a run: batches until the fresh tier is empty, ingestion has priority (yielded),
        or the run's time is up (unfinished). The `lead` lane alone refreshes the partitions' statistics: two ANALYZEs
        of one table wait for each other."""
        s = self.settings
        merged = links = 0
        since_analyze = ANALYZE_EVERY  # statistics first: the backlog may be large and unseen
        while time.monotonic() - started < s.merge_time_budget_seconds:
            with self.db.session() as session:
                if self.ingest_has_priority(session):
                    return MergeOutcome(merged, links, yielded=True)  # the caller asks again shortly
            analyze = lead and since_analyze >= ANALYZE_EVERY
            try:
                with self.db.session(timeouts=s.database_limits.maintenance) as session:
                    count, made = self.engine.merge_fresh(session, limit=s.merge_batch_size, analyze=analyze)
            except Exception as exc:
                if not is_deadlock(exc):
                    raise
                # Two lanes linking to each other's new memories, or counting the same terms, can meet in a
                # deadlock the server ends by rolling one back: its batch stays fresh for the next try.
                log.info("[merge] a batch met another lane's in a deadlock; it is taken again")
                continue
            since_analyze = count if analyze else since_analyze + count
            merged, links = merged + count, links + made
            if count == 0:
                return MergeOutcome(merged, links)
        return MergeOutcome(merged, links, unfinished=True)  # the caller continues in a fresh task
