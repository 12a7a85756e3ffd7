"""A logged database error keeps its first line: PostgreSQL's DETAIL and the statement may quote a tenant's text."""

from __future__ import annotations

import logging

import psycopg
from sqlalchemy.exc import IntegrityError

from shared.logs import FORMAT, DatabaseErrorsFirstLine

PARAMETERS = {"content": "alice's diary: the safe code is 4711"}
DETAIL = "DETAIL:  Key (content_hash)=(alice's diary: the safe code is 4711) already exists."


def _record(message: str, args: object, exc: BaseException | None) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord("mnemoflow.worker", logging.ERROR, __file__, 1, message, args, exc_info)  # type: ignore[arg-type]


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_a_database_error_in_a_traceback_keeps_its_first_line():
    inner = psycopg.errors.UniqueViolation(f'duplicate key value violates unique constraint "memories_hash"\n{DETAIL}')
    try:
        try:
            raise inner
        except psycopg.Error as exc:
            raise IntegrityError("INSERT INTO memories ...", PARAMETERS, exc, hide_parameters=True) from exc
    except IntegrityError as outer:
        error = outer
    text = DatabaseErrorsFirstLine(FORMAT).format(_record("task failed: %r", (error,), error))
    assert "4711" not in text and "DETAIL" not in text
    assert 'duplicate key value violates unique constraint "memories_hash"' in text
    assert "Traceback" in text  # the frames stay: they hold code, not content


def test_other_errors_are_logged_whole():
    error = _raised(ValueError("first line\nsecond line"))
    text = DatabaseErrorsFirstLine(FORMAT).format(_record("failed: %s", (error,), error))
    assert text.count("second line") == 2  # in the message and in the traceback
