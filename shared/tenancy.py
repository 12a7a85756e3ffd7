"""Who a database connection acts as: a PostgreSQL role, and for the app role the tenant it may see.

Row-level security (migration 0013, docs/security.md) shows `mnemoflow_app` only the rows of the tenant named in
the setting `mnemoflow.user_id`, and none when it is empty; `mnemoflow_maintenance`, the role of store-wide work
(decay, merge, re-embed, the sweeper, pruning), sees every row. Neither owns a table or bypasses row-level
security. A process connects with DATABASE_URL's user (the tables' owner, who migrates) and each engine takes its
role in the connection's start-up packet (`-c role=…`): no round trip, and RESET ROLE returns to it.

The tenant travels with the statements the app already sends. `TenantConnection` knows the tenant its current
unit of work declared (`Database.session(tenant)` / `reading(tenant)`, set when the unit takes the connection):
- in a transaction, the BEGIN that opens it also sets the tenant for that transaction (one message carrying two
  statements, where psycopg sends BEGIN alone); the setting ends with the transaction, whatever happens to it;
- outside one (the read path's autocommit statements), the tenant is the connection's, set by a statement of its
  own only when the connection served another tenant (or none) last.
"""

from __future__ import annotations

import enum
from typing import Any

import psycopg
from psycopg import errors, generators, pq, sql
from psycopg.abc import PQGen
from sqlalchemy import Engine, event
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session, SessionTransaction, sessionmaker

TENANT_SETTING = "mnemoflow.user_id"


class DbRole(enum.StrEnum):
    """The role an engine's connections act as (created by migration 0013)."""

    APP = "mnemoflow_app"  # tenant work: row-level security shows it the tenant's rows only
    MAINTENANCE = "mnemoflow_maintenance"  # store-wide work: every row, owns nothing
    OWNER = "owner"  # DATABASE_URL's own user, unchanged: schema changes only (vector indexes at start-up)


def role_options(role: DbRole, options: str | None = None) -> str | None:
    """libpq `options` that make a connection act as `role` from its first statement (appended to `options`)."""
    if role is DbRole.OWNER:
        return options
    return " ".join(filter(None, [options, f"-c role={role.value}"]))


def _setter(connection: psycopg.Connection[Any], tenant: str, *, local: bool) -> bytes:
    statement = sql.SQL("SELECT set_config({}, {}, {})").format(
        sql.Literal(TENANT_SETTING), sql.Literal(tenant), sql.Literal(local)
    )
    return statement.as_bytes(connection)


class TenantConnection(psycopg.Connection[Any]):
    """A psycopg connection of the app role that sets its unit of work's tenant without a round trip of its own
    (except when an autocommit statement follows another tenant's on the same connection)."""

    tenant: str = ""  # what the unit of work holding the connection acts for ("": no tenant, no rows)
    session_tenant: str | None = ""  # the connection's own setting outside transactions (None: unknown)

    def _start_query(self) -> PQGen[None]:
        if self._autocommit:
            if self.session_tenant != self.tenant:
                yield from self._exec_command(_setter(self, self.tenant, local=False))
                # in a pipeline the setting is only queued (and would go if the pipeline failed): set it again
                self.session_tenant = None if self._pipeline else self.tenant
            return
        if self.pgconn.transaction_status != pq.TransactionStatus.IDLE:
            return
        begin = self._get_tx_start_command()
        setter = _setter(self, self.tenant, local=True)
        if self._pipeline:
            yield from self._exec_command(begin)
            yield from self._exec_command(setter)
            yield from self._pipeline._sync_gen()
            return
        self._check_connection_ok()
        self.pgconn.send_query(begin + b"; " + setter)
        for result in (yield from generators.execute(self.pgconn)):
            if result.status == pq.ExecStatus.FATAL_ERROR:
                raise errors.error_from_result(result, encoding=self.pgconn._encoding)


def require_role(engine: Engine, role: DbRole) -> None:
    """Refuse a connection of `engine` that does not act as `role` (a pooler that dropped the start-up options would
    leave it acting as the owner, whom row-level security does not bind): checked once, when it opens."""
    if role is DbRole.OWNER:
        return

    @event.listens_for(engine, "connect")
    def _check(dbapi_connection: Any, _record: Any) -> None:
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SELECT current_user")
            (current,) = cursor.fetchone()
        dbapi_connection.rollback()
        if current != role.value:
            raise RuntimeError(
                f"this connection acts as {current!r}, not {role.value!r}: the start-up option `-c role=` did not "
                "reach the server (a connection pooler dropping it?)"
            )


def bind_tenants(engine: Engine) -> None:
    """Make `engine` (the app role's) connect with `TenantConnection`; every checkout starts with no tenant."""

    @event.listens_for(engine, "do_connect")
    def _connect(_dialect: Any, _record: Any, cargs: Any, cparams: Any) -> TenantConnection:
        return TenantConnection.connect(*cargs, **cparams)

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        dbapi_connection.tenant = ""

    @event.listens_for(engine, "checkin")
    def _checkin(dbapi_connection: Any, _record: Any) -> None:
        if dbapi_connection is not None:
            dbapi_connection.tenant = ""


def declare_tenants(sessions: sessionmaker[Session]) -> None:
    """A session of `sessions` acts for `session.info["tenant"]` on each connection it takes (no statement sent:
    the connection carries it into its next one)."""

    @event.listens_for(sessions, "after_begin")
    def _declare(session: Session, _transaction: SessionTransaction, connection: Connection) -> None:
        driver = connection.connection.driver_connection
        if isinstance(driver, TenantConnection):
            driver.tenant = session.info.get("tenant") or ""
