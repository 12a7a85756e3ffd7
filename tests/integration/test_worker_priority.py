"""MNEMOFLOW_WORKER_NICE, MNEMOFLOW_WORKER_BACKEND_NICE and MNEMOFLOW_MAINTENANCE_BACKEND_NICE take effect on a
real worker (shared/storage/priority.py): its processes run at the niceness set, and so do the PostgreSQL backends
its tasks work on when the server runs here as a user the worker may renice (the embedded one), each backend's
autogroup too (a backend leads a session of its own), the store-wide work's (the merge's) at its own; other
connections' backends, as the gateway's, keep theirs."""

from __future__ import annotations

import uuid
from pathlib import Path

import psutil
import psycopg
import pytest
import redis
from sqlalchemy import make_url

from bench.common import plain_dsn
from shared.jobs import StoreChunk
from shared.queueing import make_celery, send
from shared.storage import priority
from tests.conftest import running, service_env, wait_for_worker, worker_args
from tests.integration.helpers import job_state, make_job, wait_until

pytestmark = pytest.mark.integration

WORKER_NICE, BACKEND_NICE, MAINTENANCE_NICE = 6, 9, 13


def backends(admin_url: str, database: str) -> dict[int, str]:
    """pid -> application_name of every client backend connected to `database`."""
    with psycopg.connect(plain_dsn(admin_url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid, application_name FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend'",
            (database,),
        ).fetchall()
    return {pid: name for pid, name in rows}


def fresh(url: str) -> int:
    with psycopg.connect(plain_dsn(url)) as conn:
        return int(conn.execute("SELECT count(*) FROM memory_vectors WHERE NOT indexed").fetchone()[0])  # type: ignore[index]


def test_a_worker_and_the_backends_it_works_on_run_at_the_niceness_set(
    servers, settings, make_store, tenant, tmp_path: Path
) -> None:
    url, db = make_store("priority")
    database = make_url(url).database
    with psycopg.connect(plain_dsn(url)) as conn:  # a backend of that server: one this test may renice?
        if priority.backend_process(conn) is None:
            pytest.skip("the test database's server is not on this machine, or not this user's: no niceness is set")
    broker = servers["redis_url"].rsplit("/", 1)[0] + "/9"  # this test's messages only, no other worker's
    redis.Redis.from_url(broker).flushdb()
    env = service_env(
        servers,
        DATABASE_URL=url,
        REDIS_URL=broker,
        MNEMOFLOW_WORKER_NICE=str(WORKER_NICE),
        MNEMOFLOW_WORKER_BACKEND_NICE=str(BACKEND_NICE),
        MNEMOFLOW_MAINTENANCE_BACKEND_NICE=str(MAINTENANCE_NICE),
    )
    name = f"nice-{uuid.uuid4().hex[:6]}"
    isolated = settings.model_copy(update={"database_url": url, "redis_url": broker})
    with running(worker_args(name), env, tmp_path / "worker.log") as proc:
        wait_for_worker(isolated, name, proc, log_path=tmp_path / "worker.log")
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        assert len(family) >= 3  # the main process and its two pool processes, at least
        assert {p.pid: p.nice() for p in family} == {p.pid: WORKER_NICE for p in family}

        # A chunk stored (the app role's connections), then the merge it asks for (the maintenance role's).
        job_id = make_job(db, tenant, [{"content": f"Niceness note {i}"} for i in range(20)])
        send(
            make_celery(isolated, "tests.priority"), StoreChunk(job_id=job_id, seq=0, sector="semantic", user_id=tenant)
        )
        wait_until(lambda: job_state(db.bound(tenant), job_id)["status"] == "succeeded", timeout=60)
        wait_until(lambda: fresh(url) == 0, timeout=60)  # merged: the merge's connections were open and set
        workers = wait_until(
            lambda: (
                found
                if {"mnemoflow.worker", "mnemoflow.worker.maintenance"}
                <= set((found := backends(servers["admin_url"], database)).values())
                else None
            ),
            timeout=60,
        )
        expected = {"mnemoflow.worker": BACKEND_NICE, "mnemoflow.worker.maintenance": MAINTENANCE_NICE}
        for backend, application in workers.items():
            niceness = psutil.Process(backend).nice()
            if application in expected:
                assert niceness == expected[application], application
                assert priority.autogroup_nice(backend) in (None, expected[application]), application
            else:  # the test's own connections, and any other's
                assert niceness == 0, application
                assert priority.autogroup_nice(backend) in (None, 0), application
