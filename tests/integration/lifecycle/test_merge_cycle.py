"""The fresh tier's merge on real PostgreSQL: its lanes (`MNEMOFLOW_MERGE_CONNECTIONS` connections inserting into
HNSW at once) merge every vector once and count no memory's terms again (they were counted when stored); the
store-wide lock; the time budget.

The merge is store-wide, so these tests use a store of their own and a fresh one each (`merge_store`).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid

import pytest
from sqlalchemy import text

from shared.api.memories import MemoryCreate
from shared.db import schema_session
from shared.embedding import SyntheticEmbedder
from shared.lifecycle.merge_cycle import MergeCycle
from shared.memory.engine import MemoryEngine
from shared.storage import anchors, locks, planner_stats
from shared.storage.locks import Lock
from shared.storage.sector_models import ensure_store_model
from shared.tenancy import DbRole
from tests.integration.helpers import wait_until

pytestmark = pytest.mark.integration

DIM = 384
WORDS = ["river", "garden", "invoice", "deploy", "birthday", "anxious", "lesson", "recipe", "server", "travel"]
_stores = itertools.count()


class CountingEngine(MemoryEngine):
    """The engine, noting which server backend merged each batch (the merge's own SQL runs unchanged), and
    holding each batch's transaction open a moment, so that lanes overlap as they do on a real backlog."""

    def __init__(self, *args, hold: float = 0.02, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.hold = hold
        self.backends: list[int] = []
        self._lock = threading.Lock()

    def merge_fresh(self, session, *, limit, analyze=False):
        moved, links = super().merge_fresh(session, limit=limit, analyze=analyze)
        if moved:
            pid = int(session.execute(text("SELECT pg_backend_pid()")).scalar_one())
            with self._lock:
                self.backends.append(pid)
            time.sleep(self.hold)
        return moved, links


def new_store(make_store, settings, *, autovacuum: bool = True):
    """A fresh store: as the role the merge runs as (maintenance), and as the app's. Without `autovacuum`, it never
    analyses the read path's tables: only the statements a test runs change their statistics."""
    name = f"merge{next(_stores)}"
    url, app = make_store(name)
    embedder = SyntheticEmbedder(dim=DIM)
    with schema_session(settings.model_copy(update={"database_url": url}), "mnemoflow.tests.merge") as s:
        ensure_store_model(s, embedder, min_dim=settings.min_vector_dim, max_dim=settings.max_vector_dim)
        if not autovacuum:
            for table in planner_stats.READ_PATH_TABLES:
                s.execute(text(f"ALTER TABLE {table} SET (autovacuum_enabled = false)"))
    _, database = make_store(name, role=DbRole.MAINTENANCE)
    return database, app


@pytest.fixture
def merge_stores(make_store, settings):
    """A fresh store of this test's own: as the role the merge runs as (maintenance), and as the app's."""
    return new_store(make_store, settings)


@pytest.fixture
def unvacuumed_stores(make_store, settings):
    """`merge_stores`, with autovacuum off on the read path's tables: on a fresh database it may analyse `memories`
    a moment after its first rows, and a test of when they are due would race it."""
    return new_store(make_store, settings, autovacuum=False)


@pytest.fixture
def merge_store(merge_stores):
    """`merge_stores`' maintenance role's."""
    return merge_stores[0]


def bulk_store(database, engine: MemoryEngine, tenant: str, n: int, *, report: bool = False) -> None:
    """`n` memories of `tenant` in the fresh tier, as a batch chunk stores them; their words overlap, so lanes
    count the same terms at once. With `report`, the backend reports its row counts to the statistics as soon as
    the transaction ends (a pooled backend that reported less than a second before may otherwise wait 10 s or more)."""
    contents = [f"{WORDS[i % 10]} {WORDS[(i * 3) % 10]} note {i} of {tenant}" for i in range(n)]
    with database.session() as s:
        prepared, _ = engine.prepare([MemoryCreate(content=c) for c in contents], tenant)
        engine.store(s, prepared, settle=False)
        if report:
            s.execute(text("SELECT pg_stat_force_next_flush()"))


def fresh(database) -> int:
    with database.session() as s:
        return int(s.execute(text("SELECT count(*) FROM memory_vectors WHERE NOT indexed")).scalar_one())


def counted_terms(database, tenant: str) -> dict[str, int]:
    with database.session() as s:
        rows = s.execute(text("SELECT lexeme, df FROM term_stats WHERE user_id = :u AND df <> 0"), {"u": tenant})
        return {r.lexeme: int(r.df) for r in rows}


def recounted_terms(database, tenant: str) -> dict[str, int]:
    """Each lexeme's document frequency counted from scratch over the tenant's memories."""
    with database.session() as s:
        rows = s.execute(
            text(
                "SELECT t.lexeme, count(*) AS df FROM memories m, unnest(m.search) AS t "
                "WHERE m.user_id = :u GROUP BY t.lexeme"
            ),
            {"u": tenant},
        )
        return {r.lexeme: int(r.df) for r in rows}


def cycle(database, settings, engine, *, backlog: int = 0, **update) -> MergeCycle:
    """A merge run's cycle with `update` applied to the settings, while `backlog` messages wait to be embedded."""
    return MergeCycle(database, engine, settings.model_copy(update=update), embed_backlog=lambda: backlog)


def test_lanes_merge_every_vector_once_and_leave_every_memory_counted_once(merge_store, settings) -> None:
    engine = CountingEngine(settings, SyntheticEmbedder(dim=DIM))
    tenants = [f"t-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for tenant in tenants:
        bulk_store(merge_store, engine, tenant, 300)
    waiting = fresh(merge_store)
    assert waiting >= 600  # every memory has its primary sector's vector, some more

    outcome = cycle(merge_store, settings, engine, merge_connections=3, merge_batch_size=25).run()

    assert (outcome.merged, outcome.unfinished, outcome.skipped) == (waiting, False, False)
    assert fresh(merge_store) == 0
    assert len(set(engine.backends)) >= 2  # batches were merged on more than one connection
    for tenant in tenants:
        assert counted_terms(merge_store, tenant) == recounted_terms(merge_store, tenant)
        with merge_store.session() as s:
            documents = s.execute(text("SELECT documents FROM tenant_stats WHERE user_id = :u"), {"u": tenant})
            assert documents.scalar_one() == 300
    with merge_store.session() as s:
        linked = s.execute(text("SELECT count(DISTINCT src_id) FROM waypoints")).scalar_one()
    assert linked > 0 and outcome.links > 0


def test_one_lane_merges_alone(merge_store, settings) -> None:
    engine = CountingEngine(settings, SyntheticEmbedder(dim=DIM), hold=0)
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    bulk_store(merge_store, engine, tenant, 120)
    waiting = fresh(merge_store)

    outcome = cycle(merge_store, settings, engine, merge_connections=1, merge_batch_size=25).run()

    assert outcome.merged == waiting and fresh(merge_store) == 0
    assert len(set(engine.backends)) == 1
    assert counted_terms(merge_store, tenant) == recounted_terms(merge_store, tenant)


def test_a_run_merges_nothing_while_another_holds_the_lock(merge_store, settings) -> None:
    engine = CountingEngine(settings, SyntheticEmbedder(dim=DIM), hold=0)
    bulk_store(merge_store, engine, f"t-{uuid.uuid4().hex[:8]}", 50)
    waiting = fresh(merge_store)
    with merge_store.engine.connect() as other:
        assert locks.try_hold(other, Lock.MERGE)
        try:
            outcome = cycle(merge_store, settings, engine, merge_connections=2).run()
        finally:
            locks.release(other, Lock.MERGE)
    assert outcome.skipped and outcome.merged == 0
    assert fresh(merge_store) == waiting


def test_a_run_out_of_time_says_so_and_leaves_the_rest_fresh(merge_store, settings, caplog) -> None:
    engine = CountingEngine(settings, SyntheticEmbedder(dim=DIM), hold=0.3)
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    bulk_store(merge_store, engine, tenant, 200)
    waiting = fresh(merge_store)

    with caplog.at_level(logging.INFO, logger="mnemoflow.worker"):
        outcome = cycle(
            merge_store, settings, engine, merge_connections=2, merge_batch_size=10, merge_time_budget_seconds=0.2
        ).run()

    assert outcome.unfinished and 0 < outcome.merged < waiting
    assert fresh(merge_store) == waiting - outcome.merged
    # the log says how far the drain has come: what this run indexed, and what is still waiting
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("[merge] indexed")]
    assert line.startswith(f"[merge] indexed {outcome.merged} vectors, {outcome.links} waypoints in ")
    assert line.endswith(f"/s); {waiting - outcome.merged} still waiting")
    # every memory counted once, when it was stored: the merge, finished or not, counts nothing again
    assert counted_terms(merge_store, tenant) == recounted_terms(merge_store, tenant)
    with merge_store.session() as s:
        documents = s.execute(text("SELECT documents FROM tenant_stats WHERE user_id = :u"), {"u": tenant})
        assert documents.scalar_one() == 200


def test_a_failure_to_make_anchors_is_logged_and_the_merge_goes_on(merge_store, settings, caplog, monkeypatch) -> None:
    """Anchors only make a crowded tenant's queries faster (shared/storage/anchors.py): if they cannot be made, the
    run says so and merges as before."""
    engine = CountingEngine(settings, SyntheticEmbedder(dim=DIM), hold=0)
    bulk_store(merge_store, engine, f"t-{uuid.uuid4().hex[:8]}", 60)
    waiting = fresh(merge_store)

    def broken(session):
        raise RuntimeError("no anchors today")

    monkeypatch.setattr(anchors, "untrained", broken)
    with caplog.at_level(logging.INFO, logger="mnemoflow.worker"):
        outcome = cycle(merge_store, settings, engine, merge_connections=1).run()

    assert outcome.merged == waiting and fresh(merge_store) == 0
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "anchors could not be made" in warning.getMessage() and "no anchors today" in warning.getMessage()


def test_the_merge_yields_to_waiting_embed_work_until_the_fresh_tier_reaches_its_cap(merge_store, settings) -> None:
    """While the embed queues hold work the run leaves the fresh tier to the burst (`MNEMOFLOW_MERGE_YIELD_MAX_FRESH`),
    unless as many vectors wait as the cap; with no work waiting, or a cap of 0, it merges."""
    engine = CountingEngine(settings, SyntheticEmbedder(dim=DIM), hold=0)
    bulk_store(merge_store, engine, f"t-{uuid.uuid4().hex[:8]}", 40)
    waiting = fresh(merge_store)

    def run(backlog: int, cap: int):
        return cycle(
            merge_store,
            settings,
            engine,
            backlog=backlog,
            merge_yield_max_fresh=cap,
            merge_connections=1,
            merge_batch_size=10,
        ).run()

    below = run(backlog=3, cap=waiting + 1)  # says it yielded: the worker asks again shortly (workers/tasks.py)
    assert (below.merged, below.unfinished, below.yielded, fresh(merge_store)) == (0, False, True, waiting)

    reached = run(backlog=3, cap=waiting - 5)  # yields again once fewer than the cap wait
    assert 0 < reached.merged < waiting and fresh(merge_store) < waiting - 5 and reached.yielded

    quiet = run(backlog=0, cap=waiting + 1)  # nothing waits to be embedded
    assert quiet.merged == waiting - reached.merged and fresh(merge_store) == 0 and not quiet.yielded

    bulk_store(merge_store, engine, f"t-{uuid.uuid4().hex[:8]}", 20)
    again = fresh(merge_store)
    never = run(backlog=3, cap=0)
    assert never.merged == again > 0 and fresh(merge_store) == 0


def manual_analyses(database) -> dict[str, int]:
    """`ANALYZE`s run by hand (not autovacuum's) so far, per table of the read path."""
    with database.session() as s:
        rows = s.execute(
            text("SELECT relname, analyze_count FROM pg_stat_user_tables WHERE relname = ANY(:t)"),
            {"t": list(planner_stats.READ_PATH_TABLES)},
        ).all()
    return {r.relname: int(r.analyze_count) for r in rows}


def stale_tables(database) -> dict[str, int]:
    with database.session() as s:
        return dict(planner_stats.stale(s))


def test_every_run_analyses_the_read_paths_tables_whose_rows_changed_a_lot_even_while_it_yields(
    unvacuumed_stores, settings
) -> None:
    """A burst's queries are planned from its tables' statistics, which autovacuum refreshes too late: each run,
    merging or yielding to the burst, analyses the tables whose rows changed by half since their last `ANALYZE`
    (`memories` through migration 0023's grant), and only those."""
    merge_store, _ = unvacuumed_stores
    engine = CountingEngine(settings, SyntheticEmbedder(dim=DIM), hold=0)
    bulk_store(merge_store, engine, f"t-{uuid.uuid4().hex[:8]}", planner_stats.STALE_MIN + 500, report=True)
    # reported as the transaction ended (`report`); the wait is for a busy server
    wait_until(lambda: {"memories", "fresh_codes"} <= stale_tables(merge_store).keys(), timeout=15, interval=0.2)
    assert {"memories", "fresh_codes"} <= stale_tables(merge_store).keys()
    with merge_store.session() as s:
        s.execute(text("ANALYZE fresh_codes"))  # analysed since it changed: not due any more
    due = stale_tables(merge_store)
    assert "memories" in due and "fresh_codes" not in due
    assert due["memories"] >= planner_stats.STALE_MIN + 500
    before = manual_analyses(merge_store)

    yielded = cycle(merge_store, settings, engine, backlog=3, merge_yield_max_fresh=10**6).run()

    assert yielded.merged == 0 and fresh(merge_store) > 0  # it left the fresh tier to the burst ...
    after = manual_analyses(merge_store)
    analysed = {table for table in after if after[table] > before.get(table, 0)}
    assert analysed == set(due)  # ... and analysed what was due, nothing else
    assert stale_tables(merge_store) == {}

    cycle(merge_store, settings, engine, backlog=3, merge_yield_max_fresh=10**6).run()
    assert manual_analyses(merge_store) == after  # nothing has changed since


def test_only_the_tables_a_role_may_analyse_are_due(unvacuumed_stores, settings) -> None:
    """The app role may analyse no table (no MAINTAIN, no ownership), so nothing is due for it (its `ANALYZE` would
    only skip the table with a warning), while the same writes make `memories` due for the maintenance role."""
    maintenance, app = unvacuumed_stores
    engine = CountingEngine(settings, SyntheticEmbedder(dim=DIM), hold=0)
    bulk_store(maintenance, engine, f"t-{uuid.uuid4().hex[:8]}", planner_stats.STALE_MIN + 500, report=True)
    wait_until(lambda: "memories" in stale_tables(maintenance), timeout=15, interval=0.2)
    assert "memories" in stale_tables(maintenance)
    with app.session("anyone") as s:
        assert planner_stats.stale(s) == []
