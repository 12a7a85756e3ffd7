"""Every PostgreSQL advisory lock the project takes, in one place, each with its own key.

Two locks sharing a key serialise things that have nothing to do with each other (the decay cycle and index DDL
once did: a cycle held up every process's start-up, and a start-up made a cycle skip). `Lock` is an `IntEnum`
marked unique, so a repeated key fails at import.
"""

from __future__ import annotations

import enum

from sqlalchemy import Connection, text
from sqlalchemy.orm import Session


@enum.unique
class Lock(enum.IntEnum):
    MIGRATION = 727274  # session lock: one migrator at a time (infra/migrations/env.py)
    MERGE = 727275  # session lock: one fresh-tier merger at a time, store-wide (lifecycle.merge_cycle)
    STORE_MODEL = 727276  # transaction lock, shared by writers, exclusive for a model switch (storage.sector_models)
    INDEX_DDL = 727277  # transaction lock: one process creates vector indexes at a time (storage.sector_models)
    # 727278: the decay threads' BM25 statistics updates, before memories were counted when stored
    DECAY_CYCLE = 727279  # session lock: one decay cycle at a time, store-wide (lifecycle.decay_cycle)
    # transaction lock per tenant (two-key form: the tenant's hash is the second key): one import read at a time
    IMPORT = 727280


def hold_for_transaction(session: Session, lock: Lock, *, shared: bool = False) -> None:
    """Wait for `lock` and hold it until the session's transaction ends."""
    function = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
    session.execute(text(f"SELECT {function}(:k)"), {"k": int(lock)})


def try_hold_for_tenant(session: Session, lock: Lock, tenant: str) -> bool:
    """Take the tenant's `lock` until the session's transaction ends, if it is free; False when another holds it.
    (Two tenants whose names hash alike share it: rare, and then one waits for the other's end.)"""
    return bool(
        session.execute(
            text("SELECT pg_try_advisory_xact_lock(:k, hashtext(:t))"), {"k": int(lock), "t": tenant}
        ).scalar_one()
    )


def try_hold(connection: Connection, lock: Lock) -> bool:
    """Take `lock` for the connection's session if it is free (committed at once, so it outlives transactions);
    False when another session holds it. Release it with `release`."""
    held = bool(connection.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": int(lock)}).scalar_one())
    connection.commit()
    return held


def hold(connection: Connection, lock: Lock) -> None:
    """Wait for `lock` and hold it for the connection's session (committed at once). Release it with `release`."""
    connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": int(lock)})
    connection.commit()


def release(connection: Connection, lock: Lock) -> None:
    connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": int(lock)})
    connection.commit()


def is_held(session: Session, lock: Lock) -> bool:
    """Whether any session holds `lock` now (read from pg_locks, without taking it: taking it, even for a
    moment, would make a cycle starting at that moment skip)."""
    # A bigint key shows in pg_locks split in two 32-bit halves, objsubid 1.
    return bool(
        session.execute(
            text(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND classid = :high AND objid = :low AND objsubid = 1)"
            ),
            {"high": int(lock) >> 32, "low": int(lock) & 0xFFFFFFFF},
        ).scalar_one()
    )
