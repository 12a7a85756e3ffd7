"""Pooled connections on a real PostgreSQL: a closed one is replaced without a ping; reads run without a transaction."""

from __future__ import annotations

import time

import psycopg
from sqlalchemy import text

from shared.config import Settings
from shared.db import Database, create_db_engine


def backend_pid(database: Database) -> int:
    with database.session() as session:
        return int(session.execute(text("SELECT pg_backend_pid()")).scalar_one())


def test_a_connection_the_server_closed_is_replaced_on_checkout(settings: Settings) -> None:
    database = Database(create_db_engine(settings, "mnemoflow.tests.liveness", pool_size=1))
    try:
        first = backend_pid(database)  # back in the pool, idle
        with psycopg.connect(settings.database_url.replace("postgresql+psycopg://", "postgresql://")) as admin:
            assert admin.execute("SELECT pg_terminate_backend(%s)", (first,)).fetchone() == (True,)
        time.sleep(0.2)  # the server's farewell reaches the idle socket
        # Without a check on checkout, this would be the dead connection's "server closed the connection".
        second = backend_pid(database)
        assert second != first
        assert backend_pid(database) == second  # the new one is pooled in turn
    finally:
        database.dispose()


def test_reading_sessions_run_each_statement_on_its_own(db: Database) -> None:
    def two_clocks(session_factory) -> tuple[object, object]:
        with session_factory() as session:
            first = session.execute(text("SELECT clock_timestamp(), now()")).one()
            time.sleep(0.01)
            second = session.execute(text("SELECT now()")).scalar_one()
            assert session.execute(text("SHOW transaction_isolation")).scalar_one() == "read committed"
        return first, second

    (_, began), later = two_clocks(db.reading)
    assert later > began  # autocommit: every statement is a transaction of its own
    (_, began), later = two_clocks(db.session)
    assert later == began  # the same connection back in the pool is transactional again
