"""CPU priority of background work: the worker's processes, and their PostgreSQL backends when those are local.

Queries are answered by the gateway and its database backends; bulk writes by the workers and theirs. On a machine
that runs both (`mnemoflow up`, a small host), background work that is nicer than the gateway gives a query's CPU
back first. Raising niceness needs no privilege; lowering it does, so these only ever raise it.

Linux with autogroup scheduling (`/proc/sys/kernel/sched_autogroup_enabled`, on by default in most distributions)
shares the CPU between sessions first, and a process's niceness counts only against the processes of its own
session. Every PostgreSQL backend is a session of its own (it calls setsid), and so is each process `mnemoflow up`
starts: for a process that leads its session, the niceness is also given to its autogroup (`/proc/<pid>/autogroup`),
which then holds only it and its children.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import psutil

log = logging.getLogger(__name__)

LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


def lower(pid: int, niceness: int) -> None:
    """Raise the niceness of process `pid` to `niceness` if below, and its autogroup's if it leads its session.
    Raises OSError when it may not."""
    if os.getpriority(os.PRIO_PROCESS, pid) < niceness:
        os.setpriority(os.PRIO_PROCESS, pid, niceness)
    if os.getsid(pid) == pid:
        current = autogroup_nice(pid)
        if current is not None and current < niceness:
            Path(f"/proc/{pid}/autogroup").write_text(str(niceness))


def autogroup_nice(pid: int) -> int | None:
    """The niceness of the autogroup of `pid` ("/autogroup-91 nice 0"), or None without autogroup scheduling."""
    try:
        return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def lower_own(niceness: int) -> None:
    """This process's niceness (children started later inherit it): see `lower`. A refusal is logged, never
    raised: the process works as well at its own priority."""
    if niceness > 0:
        try:
            lower(os.getpid(), niceness)
        except OSError as exc:
            log.warning("cannot lower this process's priority to niceness %d: %s", niceness, exc)


def is_local(host: str | None) -> bool:
    """Whether a libpq host names this machine: a Unix socket directory, loopback, or none (the default socket)."""
    return not host or host.startswith("/") or host in LOCAL_HOSTS


def backend_process(dbapi_connection: Any) -> psutil.Process | None:
    """The process of this machine that serves `dbapi_connection` (psycopg), just opened, if this process may
    change its priority (same user, or root); None for a remote server, another user's, or any doubt. The pid
    PostgreSQL gives must name that backend here: a server in a container on loopback has pids of its own
    namespace, which here may name anything, so the process must be a postgres forked moments ago. Leaves the
    connection in a transaction (the caller commits, as the connect hook does)."""
    if not is_local(dbapi_connection.info.host):
        return None
    with dbapi_connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        pid = int(cur.fetchone()[0])
    try:
        backend = psutil.Process(pid)
        if backend.name() not in ("postgres", "postmaster") or not -1 < time.time() - backend.create_time() < 60:
            return None
        if os.geteuid() != 0 and backend.uids().real != os.getuid():
            return None
    except psutil.Error:
        return None
    return backend


def lower_backend(dbapi_connection: Any, niceness: int) -> int | None:
    """Raise the niceness of the PostgreSQL process serving `dbapi_connection` (psycopg) to `niceness` (see
    `backend_process`); returns its pid, or None when it cannot be done, silently: a remote or containerised server,
    or another user's, keeps its priority."""
    if niceness <= 0:
        return None
    try:
        backend = backend_process(dbapi_connection)
        if backend is None:
            return None
        lower(backend.pid, niceness)
    except Exception as exc:  # a connection never fails for its priority
        log.debug("cannot lower the priority of this connection's backend: %s", exc)
        return None
    return backend.pid
