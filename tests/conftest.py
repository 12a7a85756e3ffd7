"""Real services for the integration and e2e suites, started once per test session.

PostgreSQL 18 + pgvector and Valkey are the embedded ones (PyPI packages) unless
MNEMOFLOW_TEST_DATABASE_URL / MNEMOFLOW_TEST_REDIS_URL point at servers you run yourself.
Unit tests request none of these fixtures and touch no IO.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from infra.embedded import EmbeddedPostgres, EmbeddedRedis, free_port, recreate_database
from infra.migrate import upgrade
from infra.processes import gateway_command, wait_for_worker, wait_healthy, worker_command
from shared.config import Settings
from shared.jobs import ALL_QUEUES
from shared.security.sealing import Sealer, seal_key

ROOT = Path(__file__).resolve().parent.parent
TEST_DATABASE = "mnemoflow_test"
# The session's secrets, in this process's environment too: every Settings() of a test, and every process it
# starts, signs and seals with them (without, a development Settings would make its own under ./.mnemoflow).
TEST_SIGNING_KEY = os.environ.setdefault("MNEMOFLOW_SIGNING_KEY", secrets.token_urlsafe(32))
os.environ.setdefault("MNEMOFLOW_METRICS_TENANT_SALT", secrets.token_urlsafe(32))
SEALER = Sealer(seal_key(TEST_SIGNING_KEY.encode("utf-8")))


@pytest.fixture(scope="session")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """URLs of a PostgreSQL (fresh, migrated database) and a Redis-compatible server."""
    base = tmp_path_factory.mktemp("servers")
    postgres = redis_server = None
    admin_url = os.environ.get("MNEMOFLOW_TEST_DATABASE_URL")
    if admin_url is None:
        postgres = EmbeddedPostgres(base / "pgdata", database="postgres")
        admin_url = postgres.start()
    redis_url = os.environ.get("MNEMOFLOW_TEST_REDIS_URL")
    if redis_url is None:
        redis_server = EmbeddedRedis(base / "valkey", persist=False)
        redis_url = redis_server.start()
    database_url = recreate_database(admin_url, TEST_DATABASE)
    upgrade(database_url)
    try:
        yield {"database_url": database_url, "redis_url": redis_url, "admin_url": admin_url}
    finally:
        if redis_server:
            redis_server.stop()
        if postgres:
            postgres.stop()


@pytest.fixture(scope="session")
def settings(servers: dict[str, str]) -> Settings:
    return Settings(
        database_url=servers["database_url"],
        redis_url=servers["redis_url"],
        environment="development",  # keyless, on loopback: what `make run` is (docs/configuration.md)
        embedding_provider="synthetic",
        min_score=0.0,
    )


@pytest.fixture(scope="session")
def app_db(settings: Settings) -> Iterator[object]:
    """The app role's database, as the gateway and the workers have it: a session sees only its tenant's rows."""
    from shared.db import Database, create_db_engine

    database = Database(create_db_engine(settings, "mnemoflow.tests", pool_size=4))
    yield database
    database.dispose()


@pytest.fixture
def db(app_db, tenant: str) -> object:
    """The app role acting for this test's tenant, as a tenant's request or task does (`db.session(other)`: for
    another tenant). Store-wide work and checks take `maintenance`."""
    return app_db.bound(tenant)


@pytest.fixture(scope="session")
def maintenance(settings: Settings) -> Iterator[object]:
    """The maintenance role's database, as store-wide tasks have it (decay, merge, re-embed, the sweeper)."""
    from shared.db import Database, create_db_engine
    from shared.tenancy import DbRole

    database = Database(create_db_engine(settings, "mnemoflow.tests.maintenance", pool_size=4, role=DbRole.MAINTENANCE))
    yield database
    database.dispose()


@pytest.fixture(scope="session")
def make_store(servers: dict[str, str]) -> Iterator[object]:
    """Factory of extra migrated databases, for tests that need a store of their own (another model, say): its
    URL and its app role's database (`role=DbRole.MAINTENANCE`: the maintenance role's, of a store already made)."""
    from shared.db import Database, create_db_engine
    from shared.tenancy import DbRole

    opened: list[Database] = []
    urls: dict[str, str] = {}

    def make(name: str, role: DbRole = DbRole.APP) -> tuple[str, Database]:
        if name not in urls:
            urls[name] = recreate_database(servers["admin_url"], f"mnemoflow_test_{name}")
            upgrade(urls[name])
        url = urls[name]
        engine = create_db_engine(Settings(database_url=url), f"mnemoflow.tests.{name}", pool_size=2, role=role)
        opened.append(Database(engine))
        return url, opened[-1]

    yield make
    for database in opened:
        database.dispose()


@pytest.fixture
def tenant() -> str:
    """A user_id of its own for each test, so tests never see each other's memories."""
    return f"t-{uuid.uuid4().hex[:12]}"


def service_env(servers: dict[str, str], **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": servers["database_url"],
        "REDIS_URL": servers["redis_url"],
        "MNEMOFLOW_ENVIRONMENT": "development",  # keyless; outside development keys are required
        "MNEMOFLOW_EMBEDDING_PROVIDER": "synthetic",
        # Ingestion: small uploads keep the 413 tests cheap; 127.0.0.2 stands in for a trusted intranet host
        # (tests serve pages from it), while every other private address, 127.0.0.1 included, stays refused.
        "MNEMOFLOW_INGEST_MAX_BYTES": str(2 * 1024 * 1024),
        "MNEMOFLOW_INGEST_ALLOWED_NETWORKS": "127.0.0.2/32",
        # One gateway process unless a test asks for more; MNEMOFLOW_TEST_GATEWAY_WORKERS=2 runs a suite through two.
        "MNEMOFLOW_GATEWAY_WORKERS": os.environ.get("MNEMOFLOW_TEST_GATEWAY_WORKERS", "1"),
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


@contextlib.contextmanager
def running(args: list[str], env: dict[str, str], log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A child process for the duration of the block, stopped with SIGTERM (SIGKILL if it lingers)."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", *args],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield proc
        finally:
            stop_process(proc)


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 20) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


def worker_args(name: str, queues: tuple[str, ...] = ALL_QUEUES, concurrency: int = 2) -> list[str]:
    return worker_command(concurrency=concurrency, name=name, queues=queues, quiet_startup=True)


@pytest.fixture(scope="session")
def worker(servers: dict[str, str], settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A real `celery worker` process consuming every queue."""
    log_path = tmp_path_factory.mktemp("logs") / "worker.log"
    with running(worker_args("tests-all"), service_env(servers), log_path) as proc:
        wait_for_worker(settings, "tests-all", proc, log_path=log_path)
        yield proc


@pytest.fixture(scope="session")
def gateway(servers: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The gateway under uvicorn on a free port (MNEMOFLOW_TEST_GATEWAY_WORKERS processes, 1 by default); yields
    its base URL."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("logs") / "gateway.log"
    with running(gateway_command(host="127.0.0.1", port=port), service_env(servers), log_path) as proc:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc, log_path=log_path)
        yield url


@pytest.fixture
def http(gateway: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway, timeout=30) as client:
        yield client


def wait_for_job(http: httpx.Client, job_id: str, user_id: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = http.get(f"/jobs/{job_id}", params={"user_id": user_id}).json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not finish in {timeout}s: {job}")
