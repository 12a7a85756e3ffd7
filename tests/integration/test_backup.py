"""Backup and restore against external databases (DATABASE_URL): a store dumped and restored into an empty
database is the same store; restoring over one that is not empty needs --force, which replaces it."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import text

from infra.backup import BackupError, backup, held_rows, libpq_url, restore
from infra.embedded import recreate_database
from shared.api.memories import MemoryCreate
from shared.db import Database, create_db_engine
from shared.embedding import SyntheticEmbedder
from shared.memory.engine import MemoryEngine
from shared.tenancy import DbRole

pytestmark = pytest.mark.integration


def _rows(url: str) -> list[tuple]:
    from shared.config import Settings

    database = Database(
        create_db_engine(Settings(database_url=url), "tests.backup", pool_size=1, role=DbRole.MAINTENANCE)
    )
    try:
        with database.session() as s:
            return s.execute(
                text(
                    "SELECT m.id, m.user_id, m.content, m.salience, m.created_at, v.sector, v.embedding::text "
                    "FROM memories m JOIN memory_vectors v ON v.memory_id = m.id ORDER BY m.id, v.sector"
                )
            ).all()
    finally:
        database.dispose()


def test_a_store_restored_into_an_empty_database_is_the_same_store(make_store, settings, servers, tmp_path):
    url, app = make_store("backup_source")
    engine = MemoryEngine(settings, SyntheticEmbedder(dim=384))
    for tenant in ("ada", "ben"):
        with app.session(tenant) as s:
            for i in range(3):
                engine.add(s, tenant, MemoryCreate(content=f"{tenant} note {i} about the tide tables"))
    dump = tmp_path / "source.dump"
    assert backup(url, tmp_path / "unused", dump) > 0
    target = recreate_database(servers["admin_url"], "mnemoflow_test_restored")
    assert held_rows(libpq_url(target)) == {}
    restored = restore(target, tmp_path / "unused", dump, force=False)
    assert restored["memories"] == 6
    backed_up = _rows(url)
    assert _rows(target) == backed_up

    with pytest.raises(BackupError, match=r"not empty \(6 memories.*--force"):
        restore(target, tmp_path / "unused", dump, force=False)
    with app.session("ada") as s:  # the source moves on; the target is replaced by the backup, not merged
        engine.add(s, "ada", MemoryCreate(content="ada: a note written after the backup"))
    with psycopg.connect(libpq_url(target), autocommit=True) as conn:  # the target changes too: --force replaces it
        conn.execute("UPDATE memories SET salience = 0.01 WHERE user_id = 'ada'")
    again = restore(target, tmp_path / "unused", dump, force=True)
    assert again["memories"] == 6 and _rows(target) == backed_up
