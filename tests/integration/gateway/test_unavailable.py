"""A database that cannot serve now is a 503 with Retry-After, not a 500: PostgreSQL stopped (and back), the
pool with no connection free, a statement or lock wait past its limit. A bug is a 500 logged with the request's
id. A real gateway app in process, real PostgreSQL servers and Valkey."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from infra.embedded import EmbeddedPostgres
from infra.migrate import upgrade
from services.gateway.app import create_app
from shared.config import Settings

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def own_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedPostgres, str]]:
    """A PostgreSQL server of this module's own, to stop and start again."""
    server = EmbeddedPostgres(tmp_path_factory.mktemp("own-postgres") / "pgdata", database="mnemoflow_outage")
    url = server.start()
    upgrade(url)
    try:
        yield server, url
    finally:
        server.stop()


def add(client: TestClient, tenant: str, content: str = "the spare key is under the blue pot") -> httpx.Response:
    return client.post("/memory/add", json={"content": content, "user_id": tenant})


def assert_503(answer: httpx.Response, retry_after: str, says: str) -> None:
    assert answer.status_code == 503, answer.text
    assert answer.headers["Retry-After"] == retry_after
    error = answer.json()["error"]
    assert error["code"] == "service_unavailable" and says in error["message"], error


def test_with_postgres_stopped_requests_are_503_and_succeed_once_it_is_back(own_postgres, settings, tenant):
    server, url = own_postgres
    app = create_app(settings.model_copy(update={"database_url": url}))
    with TestClient(app, raise_server_exceptions=False) as client:
        assert add(client, tenant).status_code == 200
        server._server.stop()  # a real shutdown: pooled connections are told so, new ones are refused
        try:
            assert_503(add(client, tenant, "written while the database is down"), "5", "database")
            query = client.post("/memory/query", json={"query": "where is the spare key?", "user_id": tenant})
            assert_503(query, "5", "database")
        finally:
            server._server.ensure_postgres_running()
        assert add(client, tenant, "written once it is back").status_code == 200
        query = client.post("/memory/query", json={"query": "where is the spare key?", "user_id": tenant})
        assert query.status_code == 200 and query.json()["matches"]


def test_with_no_pooled_connection_free_a_request_is_503(settings, tenant):
    app = create_app(settings.model_copy(update={"gateway_pool_size": 1, "gateway_pool_timeout_seconds": 0.2}))
    with TestClient(app) as client:
        engine = app.state.mnemoflow.db.engine
        with engine.connect(), engine.connect():  # the pool's one connection and its one overflow
            assert_503(add(client, tenant), "1", "busy")
        assert add(client, tenant).status_code == 200


@pytest.mark.parametrize(
    ("limits", "says"),
    [
        ({"gateway_lock_timeout_ms": 200}, "lock"),
        ({"gateway_statement_timeout_ms": 1000, "gateway_lock_timeout_ms": 0}, "time limit"),
    ],
    ids=["lock-timeout", "statement-timeout"],
)
def test_a_write_waiting_past_its_limit_for_a_lock_is_503(settings: Settings, tenant, limits, says):
    # The memory is written under the default limits: on a loaded machine the tight one could refuse the write itself.
    with TestClient(create_app(settings)) as client:
        memory_id = add(client, tenant).json()["id"]
    app = create_app(settings.model_copy(update=limits))
    with TestClient(app) as client:
        assert settings.database_url
        with psycopg.connect(settings.database_url.replace("postgresql+psycopg://", "postgresql://")) as other:
            other.execute("SELECT 1 FROM memories WHERE id = %s FOR UPDATE", (memory_id,))  # held until rollback
            stuck = client.patch(f"/memory/{memory_id}", json={"user_id": tenant, "tags": ["garden"]})
            other.rollback()
        assert_503(stuck, "1", says)
        assert client.patch(f"/memory/{memory_id}", json={"user_id": tenant, "tags": ["garden"]}).status_code == 200


def test_a_bug_is_a_500_logged_with_the_request_id_it_answers_with(settings, caplog):
    app = create_app(settings)

    def broken_sql() -> None:  # a database error that retrying would not fix
        with app.state.mnemoflow.db.session() as session:
            session.execute(text("SELECT * FROM no_such_table"))

    async def broken() -> None:
        raise RuntimeError("a bug")

    app.add_api_route("/broken-sql", broken_sql)
    app.add_api_route("/broken", broken)
    with TestClient(app, raise_server_exceptions=False) as client, caplog.at_level(logging.ERROR, "mnemoflow.gateway"):
        fine = client.get("/health")
        assert len(fine.headers["X-Request-ID"]) == 32  # every answer names its request
        for path, given in (("/broken-sql", "trace-sql-1"), ("/broken", "trace-bug-2")):
            answer = client.get(path, headers={"X-Request-ID": given})
            assert answer.status_code == 500 and answer.headers["X-Request-ID"] == given
            assert answer.json()["error"]["code"] == "internal_error" and given in answer.json()["error"]["message"]
            assert any(given in r.getMessage() and r.exc_info for r in caplog.records), path
