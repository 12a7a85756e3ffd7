"""User ids stored before the user_id rule: migration 0012 reports them (and changes no row), and the operator's
live report (shared.storage.tenants) finds the same ones."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import create_engine, text

from infra.embedded import recreate_database
from infra.migrate import upgrade
from shared.api.common import check_user_id
from shared.config import normalize_database_url
from shared.db import Database
from shared.storage import tenants as tenant_store

pytestmark = pytest.mark.integration

LEGACY = [
    "alice bob",
    "_legacy",
    "ålice",
    "a~copy",
    "line\nbreak",
    "\u212aelvin",  # the Kelvin sign, not a K
    "y" * 257,
    "z" * 300,
]
FITTING = ["alice", "org:bob@example.com", "-x", "w" * 256]


def _fits(user_id: str) -> bool:
    try:
        check_user_id(user_id)
    except ValueError:
        return False
    return True


def _insert_memory(connection, user_id: str, content: str) -> None:
    connection.execute(
        text(
            "INSERT INTO memories (user_id, content, primary_sector, sectors, content_hash, salience, decay_lambda) "
            "VALUES (:u, :c, 'semantic', ARRAY['semantic'], md5(:c), 0.5, 0.005)"
        ),
        {"u": user_id, "c": content},
    )


KEYS = (("memories", "id"), ("jobs", "id"), ("documents", "id"), ("conversation_heads", "user_id, key"))


def _snapshot(connection) -> dict[str, list[dict]]:
    """Every row of the tables the migration reads, by table; columns later migrations add are left out."""
    return {
        table: connection.execute(text(f"SELECT to_jsonb(t) FROM {table} t ORDER BY {key}")).scalars().all()
        for table, key in KEYS
    }


def _unchanged(after: dict[str, list[dict]], before: dict[str, list[dict]]) -> bool:
    """True when each row kept every value it had; columns added since (valid_to, request_hash) are ignored."""
    return all(
        len(after[table]) == len(rows)
        and all({k: new.get(k) for k in old} == old for new, old in zip(after[table], rows, strict=True))
        for table, rows in before.items()
    )


def test_the_migration_reports_stored_user_ids_that_no_longer_fit_and_changes_no_row(servers, caplog):
    assert not any(_fits(u) for u in LEGACY) and all(_fits(u) for u in FITTING)
    url = recreate_database(servers["admin_url"], "mnemoflow_test_legacy_user_ids")
    upgrade(url, "0011")
    engine = create_engine(normalize_database_url(url))
    try:
        with engine.begin() as connection:
            for i, user_id in enumerate(LEGACY + FITTING):
                _insert_memory(connection, user_id, f"note {i}")
            _insert_memory(connection, "alice bob", "a second note")
            for user_id, kind in [("alice bob", "batch"), ("alice bob", "ingest"), ("_system", "reembed")]:
                connection.execute(text("INSERT INTO jobs (user_id, kind) VALUES (:u, :k)"), {"u": user_id, "k": kind})
            connection.execute(text("INSERT INTO jobs (user_id, kind) VALUES ('alice', 'batch')"))
            connection.execute(
                text("INSERT INTO documents (user_id, source_type, content_hash) VALUES ('a~copy', 'upload', 'h')")
            )
            connection.execute(text("INSERT INTO conversation_heads (user_id, key) VALUES ('_legacy', 'session_id=1')"))
            before = _snapshot(connection)

        with caplog.at_level(logging.WARNING, logger="mnemoflow.migrations"):
            upgrade(url)

        messages = [r.getMessage() for r in caplog.records if r.name == "mnemoflow.migrations"]
        lines = {m.split(":", 1)[0]: m for m in messages if " user ids that no longer fit " in m}
        assert set(lines) == {"memories", "jobs", "documents", "conversation_heads"}
        assert lines["memories"].startswith(f"memories: {len(LEGACY) + 1} rows of {len(LEGACY)} user ids")
        assert "e.g. 'alice bob', " in lines["memories"]  # the most rows first
        assert lines["memories"].count(", '") == 4  # five examples
        assert "y" * 80 + "'" in lines["memories"]  # each cut at 80 characters
        assert lines["jobs"].startswith("jobs: 2 rows of 1 user ids")  # "_system" owns the store-wide re-embed
        assert lines["documents"].startswith("documents: 1 rows of 1 user ids") and "'a~copy'" in lines["documents"]
        assert "'_legacy'" in lines["conversation_heads"]
        assert "GET /maintenance/user-ids/memories" in messages[-1] and len(messages) == 5

        with engine.begin() as connection:
            assert _unchanged(_snapshot(connection), before)
            assert connection.execute(text("SELECT count(*) FROM jobs WHERE request_hash IS NOT NULL")).scalar() == 0

        database = Database(engine)
        with database.session() as session:
            live = tenant_store.nonconforming_user_ids(session, examples=100)
        # and their memories' BM25 statistics, which migration 0020 counted (a memory counts from when it is stored)
        assert set(live) == {"memories", "jobs", "documents", "conversation_heads", "tenant_stats"}
        assert live["memories"]["rows"] == len(LEGACY) + 1 and live["memories"]["user_ids"] == len(LEGACY)
        assert set(live["memories"]["examples"]) == {u[: tenant_store.EXAMPLE_CHARS] for u in LEGACY}
        assert live["jobs"] == {"rows": 2, "user_ids": 1, "examples": ["alice bob"]}
    finally:
        engine.dispose()
