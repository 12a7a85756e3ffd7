"""Plain, greppable log lines for every process; a database error shows its first line only."""

from __future__ import annotations

import logging
from collections.abc import Iterator

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
# A database error's later lines (PostgreSQL's DETAIL, a constraint's key values) may quote what a tenant stored.
DATABASE_MODULES = ("sqlalchemy", "psycopg")


def configure_logging(level: str = "INFO") -> None:
    root = logging.getLogger()
    if not any(getattr(h, "_mnemoflow", False) for h in root.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(DatabaseErrorsFirstLine(FORMAT))
        handler._mnemoflow = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(level.upper())


def is_database_error(exc: BaseException) -> bool:
    return type(exc).__module__.split(".")[0] in DATABASE_MODULES


def first_line(exc: BaseException) -> str:
    """The exception's message up to its first line break (its type's name if it has none)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    """`exc`, its causes and contexts, each once."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


class DatabaseErrorsFirstLine(logging.Formatter):
    """Formats as usual, then cuts every database error in the line (its message, a traceback's last line, a
    `%r` of it) down to its first line. SQLAlchemy's engines hide the statements' parameters (shared/db.py)."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        errors = list(_chain(record.exc_info[1])) if record.exc_info else []
        values = record.args.values() if isinstance(record.args, dict) else record.args or ()
        errors += [a for a in values if isinstance(a, BaseException)]
        for exc in errors:
            if not is_database_error(exc):
                continue
            whole, short = str(exc), first_line(exc)
            if whole == short:
                continue
            text = text.replace(whole, short).replace(repr(whole), repr(short))
            text = text.replace(repr(exc), f"{type(exc).__name__}({short!r})")
            # Whatever quoted it otherwise (a truncated repr): its later lines go, wherever they are.
            for line in whole.strip().splitlines()[1:]:
                if line.strip():
                    text = text.replace(line, "")
        return text
