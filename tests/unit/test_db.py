"""How the query path's reads are handed to psycopg, and which database errors may be run again."""

from __future__ import annotations

from psycopg import errors
from sqlalchemy.exc import OperationalError

from shared.db import _driver_sql, is_deadlock


def test_binds_become_binary_placeholders_and_casts_stay():
    sql = "SELECT v.embedding::vector(384) <=> CAST(:q AS vector(384)) FROM t WHERE id = ANY(CAST(:ids AS uuid[]))"
    assert _driver_sql(sql) == (
        "SELECT v.embedding::vector(384) <=> CAST(%(q)b AS vector(384)) FROM t WHERE id = ANY(CAST(%(ids)b AS uuid[]))"
    )


def test_a_literal_percent_is_escaped_and_names_inside_words_are_not_binds():
    assert _driver_sql("SELECT 'a%b' LIKE x, t.col:bad, :user_id") == "SELECT 'a%%b' LIKE x, t.col:bad, %(user_id)b"


def test_a_deadlock_is_told_apart_from_other_operational_errors():
    assert is_deadlock(OperationalError("UPDATE t", {}, errors.DeadlockDetected("deadlock detected")))
    assert not is_deadlock(OperationalError("UPDATE t", {}, errors.LockNotAvailable("lock timeout")))
    assert not is_deadlock(OperationalError("UPDATE t", {}, errors.QueryCanceled("a deadlock in the text only")))
    assert not is_deadlock(errors.DeadlockDetected("not wrapped"))  # sessions raise SQLAlchemy's errors
