"""Which failures of the database or Redis are "not now" (503 with Retry-After) and which are bugs (500)."""

from __future__ import annotations

import psycopg
import pytest
import redis
from sqlalchemy import exc as sa_exc

from services.gateway.errors import DOWN_RETRY_SECONDS, OVERLOADED_RETRY_SECONDS, unavailable


def wrapped(error: Exception, *, invalidated: bool = False) -> sa_exc.DBAPIError:
    """As SQLAlchemy raises a driver's error."""
    return sa_exc.DBAPIError.instance("SELECT 1", {}, error, psycopg.Error, connection_invalidated=invalidated)


@pytest.mark.parametrize(
    ("error", "retry_after"),
    [
        (sa_exc.TimeoutError("QueuePool limit of size 15 overflow 15 reached"), OVERLOADED_RETRY_SECONDS),
        (
            wrapped(psycopg.errors.QueryCanceled("canceling statement due to statement timeout")),
            OVERLOADED_RETRY_SECONDS,
        ),
        (wrapped(psycopg.errors.LockNotAvailable("canceling statement due to lock timeout")), OVERLOADED_RETRY_SECONDS),
        (wrapped(psycopg.errors.DeadlockDetected("deadlock detected")), OVERLOADED_RETRY_SECONDS),
        (wrapped(psycopg.errors.TooManyConnections("sorry, too many clients already")), DOWN_RETRY_SECONDS),
        (
            wrapped(psycopg.errors.AdminShutdown("terminating connection due to administrator command")),
            DOWN_RETRY_SECONDS,
        ),
        (wrapped(psycopg.errors.CannotConnectNow("the database system is starting up")), DOWN_RETRY_SECONDS),
        (wrapped(psycopg.OperationalError("connection failed: Connection refused")), DOWN_RETRY_SECONDS),
        (wrapped(psycopg.OperationalError("server closed the connection"), invalidated=True), DOWN_RETRY_SECONDS),
        (wrapped(psycopg.InterfaceError("the connection is closed")), DOWN_RETRY_SECONDS),
        (redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379"), DOWN_RETRY_SECONDS),
    ],
)
def test_the_database_or_redis_unable_to_serve_now_is_a_503(error, retry_after):
    found = unavailable(error)
    assert found is not None and found[1] == retry_after and found[0]


@pytest.mark.parametrize(
    "error",
    [
        wrapped(psycopg.errors.UndefinedTable('relation "nope" does not exist')),
        wrapped(psycopg.errors.UniqueViolation("duplicate key value violates unique constraint")),
        wrapped(psycopg.errors.DataException("invalid input syntax")),
        sa_exc.InvalidRequestError("this session is in a prepared state"),
        redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
        RuntimeError("a bug"),
    ],
)
def test_an_error_retrying_would_not_fix_stays_a_500(error):
    assert unavailable(error) is None
