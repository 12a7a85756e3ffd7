"""Statement and lock timeouts on a real PostgreSQL: each engine's own, a transaction's longer ones, and the work
that must not be cut short by them (index DDL at start-up, the decay cycle's steps)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from shared.api.memories import MemoryCreate
from shared.backpressure import DatabaseLimits, Timeouts
from shared.config import Settings
from shared.db import Database, create_db_engine, schema_session
from shared.embedding import SyntheticEmbedder
from shared.lifecycle.decay_cycle import CycleOptions, DecayCycle
from shared.memory.engine import MemoryEngine
from shared.memory.sectors import SECTORS
from shared.storage.locks import Lock
from shared.storage.sector_models import ensure_store_model, ensure_vector_indexes
from shared.storage.vector_index import vector_index_names
from shared.tenancy import DbRole

pytestmark = pytest.mark.integration

IMPATIENT = Timeouts(statement_ms=60_000, lock_ms=100)  # gives up on any lock wait at once


def plain(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


@contextmanager
def database(
    settings: Settings, timeouts: Timeouts | None = None, url: str | None = None, role: DbRole = DbRole.APP
) -> Iterator[Database]:
    configured = settings.model_copy(update={"database_url": url}) if url else settings
    db = Database(create_db_engine(configured, "mnemoflow.tests.timeouts", pool_size=2, timeouts=timeouts, role=role))
    try:
        yield db
    finally:
        db.dispose()


@contextmanager
def held_elsewhere(url: str, sql: str, params: tuple, *, seconds: float) -> Iterator[None]:
    """Another session takes a lock with `sql` and lets it go after `seconds` (rolled back)."""
    conn = psycopg.connect(plain(url))
    conn.execute(sql, params)
    timer = threading.Timer(seconds, conn.rollback)
    timer.start()
    try:
        yield
    finally:
        timer.join()
        conn.close()


def show(db: Database, setting: str, timeouts: Timeouts | None = None) -> str:
    with db.session(timeouts=timeouts) as session:
        return str(session.execute(text(f"SHOW {setting}")).scalar_one())


def test_an_engine_sets_its_timeouts_on_every_connection_the_workers_by_default(settings):
    with database(settings) as db:  # no timeouts given: the workers' (every process but the gateway)
        assert (show(db, "statement_timeout"), show(db, "lock_timeout")) == ("5min", "1min")
    with database(settings, DatabaseLimits().gateway) as db:
        assert (show(db, "statement_timeout"), show(db, "lock_timeout")) == ("15s", "5s")
        with db.reading() as session:  # the query path's autocommit sessions too
            assert session.execute(text("SHOW statement_timeout")).scalar_one() == "15s"


def test_a_statement_past_the_engines_limit_is_cancelled(settings):
    with (
        database(settings, Timeouts(statement_ms=200, lock_ms=100)) as db,
        pytest.raises(OperationalError) as caught,
        db.reading() as session,
    ):
        session.execute(text("SELECT pg_sleep(5)"))
    assert isinstance(caught.value.orig, psycopg.errors.QueryCanceled)


def test_a_transaction_may_have_longer_timeouts_and_the_connection_gets_the_engines_back(settings):
    with database(settings, Timeouts(statement_ms=200, lock_ms=100)) as db:
        with db.session(timeouts=Timeouts(statement_ms=0, lock_ms=0)) as session:
            session.execute(text("SELECT pg_sleep(0.5)"))  # past the engine's 200 ms: fine in this transaction
            assert session.execute(text("SHOW lock_timeout")).scalar_one() == "0"
        assert show(db, "statement_timeout") == "200ms"  # SET LOCAL: gone with the transaction


def test_index_ddl_at_start_up_waits_for_another_process_however_long(make_store, settings):
    # A process starting on a store without its indexes while another one builds them waits for it; the
    # engine's lock timeout would have failed its start-up.
    url, _ = make_store("index_ddl")
    with (
        database(settings, IMPATIENT, url=url, role=DbRole.OWNER) as db,  # start-up's DDL is the owner's
        held_elsewhere(url, "SELECT pg_advisory_xact_lock(%s)", (int(Lock.INDEX_DDL),), seconds=1.0),
        db.session() as session,
    ):
        ensure_vector_indexes(session, {256}, m=16, ef_construction=64)  # the migration made the 384 ones
    with psycopg.connect(plain(url)) as conn:
        built = conn.execute("SELECT indexname FROM pg_indexes WHERE indexname LIKE %s", ("%hnsw_256%",)).fetchall()
    assert sorted(name for (name,) in built) == sorted(vector_index_names(256))  # the one graph and each sector's


def test_a_decay_step_waits_out_a_lock_longer_than_the_workers_lock_timeout(make_store, settings, tenant):
    # A query's reinforcement may hold a row the step decays; the cycle's transactions have the maintenance
    # timeouts (minutes), not the engine's.
    url, store = make_store("timeouts")
    embedder = SyntheticEmbedder(dim=384)
    engine = MemoryEngine(settings, embedder)
    with schema_session(settings.model_copy(update={"database_url": url}), "mnemoflow.tests.timeouts") as s:
        ensure_store_model(s, embedder, min_dim=settings.min_vector_dim, max_dim=settings.max_vector_dim)
    with store.session(tenant) as s:
        prepared, _ = engine.prepare([MemoryCreate(content=f"lighthouse log {i}") for i in range(50)], tenant)
        refs = engine.store(s, prepared, settle=False)
    locked: uuid.UUID = refs[0].id
    cycle_settings = settings.model_copy(update={"decay_sleep_ms": 0, "decay_threads": 1})
    with (
        database(settings, IMPATIENT, url=url, role=DbRole.MAINTENANCE) as db,  # the cycle's role
        held_elsewhere(url, "SELECT 1 FROM memories WHERE id = %s FOR UPDATE", (locked,), seconds=1.0),
    ):
        cycle = DecayCycle(db, cycle_settings, dict.fromkeys(SECTORS, 384))
        later = datetime.now(UTC) + timedelta(days=30)  # every row decays, the locked one too
        run = cycle.run(options=CycleOptions(trigger="operator", ratio=1.0, now=later))
    assert run["status"] == "succeeded" and run["processed"] == 50
