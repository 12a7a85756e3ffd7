"""Engines and sessions: one engine per process, named, built at start-up (never at import)."""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import re
import select
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg
from pgvector.psycopg import register_vector
from psycopg import errors
from psycopg.rows import dict_row, namedtuple_row
from sqlalchemy import URL, Engine, create_engine, event, exc, make_url, text
from sqlalchemy.orm import Session, sessionmaker

from shared.backpressure import Timeouts
from shared.config import Settings, normalize_database_url
from shared.storage import priority
from shared.tenancy import DbRole, bind_tenants, declare_tenants, require_role, role_options

log = logging.getLogger(__name__)


def create_db_engine(
    settings: Settings,
    application_name: str,
    *,
    pool_size: int = 10,
    max_overflow: int | None = None,
    pool_timeout: float = 30.0,
    timeouts: Timeouts | None = None,
    role: DbRole = DbRole.APP,
    backend_nice: int = 0,
) -> Engine:
    """An engine for this process; `application_name` shows in pg_stat_activity. Its connections act as `role`
    (shared/tenancy.py): the app role by default, which sees only the rows of a session's tenant. `max_overflow`:
    connections opened beyond `pool_size` on demand (default: as many again). `timeouts`: each connection's
    statement and lock timeouts (default: the workers', `settings.database_limits.worker`). `backend_nice`: the
    niceness each connection's server process is given when the server is local (shared/storage/priority.py)."""
    if not settings.database_url:
        raise RuntimeError("DATABASE_URL is not set; start the stack with `mnemoflow up` or set it")
    limits = timeouts or settings.database_limits.worker
    url = make_url(normalize_database_url(settings.database_url))
    engine = create_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size if max_overflow is None else max_overflow,
        pool_timeout=pool_timeout,
        pool_recycle=1800,
        # The most recently used connection first: a few stay busy with warm backend caches and prepared
        # statements (psycopg prepares a statement on its fifth run on a connection); in FIFO order a query
        # went round all of them, and on each its statements ran unprepared and its backend's caches cold.
        pool_use_lifo=True,
        # An error's text never carries a statement's values (a tenant's content) into a log or a traceback.
        hide_parameters=True,
        connect_args={"application_name": application_name, "options": role_options(role, _url_options(url))},
    )
    event.listen(engine, "checkout", _check_alive)
    require_role(engine, role)
    if role is DbRole.APP:
        bind_tenants(engine)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):
        try:
            register_vector(dbapi_connection)
        except Exception:  # the extension appears with the first migration
            log.debug("vector type not registered (migrations not applied yet?)")
        # Per-connection defaults for the read path: iterative HNSW scans keep filtered searches complete.
        with dbapi_connection.cursor() as cur:
            cur.execute(f"SET hnsw.ef_search = {int(settings.hnsw_ef_search)}")
            cur.execute("SET hnsw.iterative_scan = relaxed_order")
            # A statement or lock wait past its limit fails (the gateway answers 503) instead of holding a
            # connection while the pool and the callers behind it wait.
            cur.execute(f"SET statement_timeout = {int(limits.statement_ms)}")
            cur.execute(f"SET lock_timeout = {int(limits.lock_ms)}")
        if backend_nice:
            priority.lower_backend(dbapi_connection, backend_nice)
        dbapi_connection.commit()

    return engine


def _url_options(url: URL) -> str | None:
    """The libpq `options` DATABASE_URL already gives (kept: the role is added to them)."""
    value = url.query.get("options")
    return " ".join(value) if isinstance(value, tuple) else value


def _check_alive(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """Discard a pooled connection the server has closed, without a round trip (SQLAlchemy's `pool_pre_ping`
    costs a `SELECT 1` on every checkout: two of a query's round trips were these pings).

    An idle connection's socket has nothing to read unless the server wrote to it, and a server that ends a
    session (restart, `pg_terminate_backend`, idle timeout) writes its farewell and closes: a readable socket
    means the connection is gone. SQLAlchemy then connects afresh. A half-open connection nobody closed is
    found by neither check before it is used: that query fails, and the connection, broken by then, is
    replaced at its next checkout."""
    if dbapi_connection.closed or dbapi_connection.broken:
        raise exc.DisconnectionError("the connection is closed")
    try:
        fd = dbapi_connection.fileno()
    except Exception as error:  # a closed connection has no socket
        raise exc.DisconnectionError(str(error)) from error
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    if poller.poll(0):
        raise exc.DisconnectionError("the server closed the connection (the socket is readable while idle)")


class Database:
    """The engine and session factory of one process.

    On the app role's engine a session acts for a tenant (`session(tenant)`, `reading(tenant)`, or the tenant this
    view was `bound` to) and sees only its rows; without one it sees none. The maintenance role's sees every row."""

    def __init__(self, engine: Engine, tenant: str | None = None) -> None:
        self.engine = engine
        self.tenant = tenant
        self._sessions = sessionmaker(bind=engine, expire_on_commit=False, autoflush=False)
        # Reads that need no transaction: in READ COMMITTED every statement takes its own snapshot either way,
        # so BEGIN and COMMIT would be two round trips that change nothing.
        self._readers = sessionmaker(
            bind=engine.execution_options(isolation_level="AUTOCOMMIT"), expire_on_commit=False, autoflush=False
        )
        declare_tenants(self._sessions)
        declare_tenants(self._readers)

    def bound(self, tenant: str) -> Database:
        """This database acting for `tenant` (same engine and pool): what a tenant's task hands to services."""
        view = copy.copy(self)
        view.tenant = tenant
        return view

    @contextlib.contextmanager
    def reading(self, tenant: str | None = None) -> Iterator[Session]:
        """A session for reads only, each statement on its own (autocommit): the query path's."""
        session = self._readers(info={"tenant": tenant or self.tenant})
        try:
            yield session
        finally:
            session.close()

    @contextlib.contextmanager
    def session(self, tenant: str | None = None, *, timeouts: Timeouts | None = None) -> Iterator[Session]:
        """One unit of work for `tenant` (default: the tenant this view is bound to): committed when the block ends,
        rolled back on error. `timeouts`: this transaction's own statement and lock timeouts instead of the
        engine's (the lifecycle cycles' long steps)."""
        session = self._sessions(info={"tenant": tenant or self.tenant})
        try:
            if timeouts is not None:
                set_timeouts(session, timeouts)
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    def dispose(self) -> None:
        self.engine.dispose()


def is_deadlock(error: BaseException) -> bool:
    """Whether `error` (SQLAlchemy's, around psycopg's) is the server ending a deadlock by rolling this transaction
    back: the transaction can be run again."""
    return isinstance(getattr(error, "orig", None), errors.DeadlockDetected)


def set_timeouts(session: Session, timeouts: Timeouts) -> None:
    """Statement and lock timeouts for the rest of the session's transaction (SET LOCAL; 0: none)."""
    session.execute(
        text("SELECT set_config('statement_timeout', :s, true), set_config('lock_timeout', :l, true)"),
        {"s": str(int(timeouts.statement_ms)), "l": str(int(timeouts.lock_ms))},
    )


@contextlib.contextmanager
def schema_session(settings: Settings, application_name: str) -> Iterator[Session]:
    """A session as the tables' owner (DATABASE_URL's own user) on a connection of its own, closed after: for what
    only the owner may do, at start-up (the vector indexes of a new model's dimensions)."""
    database = Database(create_db_engine(settings, application_name, pool_size=1, role=DbRole.OWNER))
    try:
        with database.session() as session:
            yield session
    finally:
        database.dispose()


_BIND = re.compile(r"(?<![:\w]):(\w+)")


@functools.lru_cache(maxsize=256)
def _driver_sql(sql: str) -> str:
    """SQLAlchemy's `:name` binds as psycopg's binary `%(name)b` (a literal % doubled; `::type` casts kept)."""
    return _BIND.sub(r"%(\1)b", sql.replace("%", "%%"))


def read_rows(session: Session, sql: str, params: Mapping[str, Any], *, as_dicts: bool = False) -> list[Any]:
    """Run a read of the query path on the session's own connection and transaction, straight through psycopg.

    `sql` is written as for `text()`. Parameters and results go in binary (a vector as its floats' bytes, ids
    as 16 bytes, arrays without text to parse) and rows come back as named tuples (`as_dicts`: dicts) without
    SQLAlchemy's statement and result layers: on a query's five round trips those cost about as much Python
    time as the rest of the query.
    """
    connection = session.connection().connection.driver_connection
    assert connection is not None  # a checked-out connection always has its driver's
    with connection.cursor(row_factory=dict_row if as_dicts else namedtuple_row) as cursor:
        cursor.execute(_driver_sql(sql), params, binary=True)
        return cursor.fetchall()


def write_rows(session: Session, sql: str, params: Any) -> list[Any]:
    """Run a write of binary arrays (psycopg's `%b` placeholders in `sql`) on the session's own connection and
    transaction, straight through psycopg; the rows it returns, as named tuples. A database error is raised as
    SQLAlchemy raises it for any other statement (`sqlalchemy.exc.DBAPIError` and its kinds), so callers and the
    workers' retries see one family of errors whichever way a statement went."""
    connection = session.connection().connection.driver_connection
    assert connection is not None
    try:
        with connection.cursor(row_factory=namedtuple_row) as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description is not None else []
    except psycopg.Error as error:
        raise exc.DBAPIError.instance(sql, None, error, psycopg.Error) from error
