"""Alembic environment: online migrations only, URL from the caller or the settings object."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from shared.config import get_settings, normalize_database_url
from shared.storage.locks import Lock, hold, release

url = context.config.attributes.get("database_url") or get_settings().database_url
if not url:
    raise RuntimeError("no database URL: set DATABASE_URL or run through `mnemoflow migrate`")

engine = create_engine(normalize_database_url(url), poolclass=pool.NullPool, hide_parameters=True)
with engine.connect() as connection:
    # Gateway, workers and tests may start at once: only one of them migrates at a time.
    hold(connection, Lock.MIGRATION)
    try:
        context.configure(connection=connection)
        with context.begin_transaction():
            context.run_migrations()
    finally:
        connection.rollback()
        release(connection, Lock.MIGRATION)
engine.dispose()
