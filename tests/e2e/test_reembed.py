"""`POST /maintenance/reembed` end to end: a synthetic store moved to the local MiniLM model by real workers."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from infra.embedded import free_port
from infra.processes import gateway_command, wait_healthy
from services.cli.main import app
from shared.tenancy import DbRole
from tests.conftest import running, service_env, wait_for_job, wait_for_worker, worker_args

pytestmark = pytest.mark.e2e

ADMIN_KEY = "operator-key-for-tests-0123"
TENANT_KEY = "tenant-key-for-tests-4567"


def gateway(servers, env, tmp_path, name):
    port = free_port()
    log_path = tmp_path / f"{name}.log"
    context = running(gateway_command(host="127.0.0.1", port=port), env, log_path)
    proc = context.__enter__()
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc, log_path=log_path)
    return context, url


def test_a_store_moves_to_another_model_on_the_sector_queues(make_store, servers, settings, tmp_path):
    url, db = make_store("reembed_e2e", role=DbRole.MAINTENANCE)  # what it checks is the whole store
    broker = servers["redis_url"].rsplit("/", 1)[0] + "/8"  # queues of its own: no other worker takes its tasks
    env = service_env(
        servers,
        DATABASE_URL=url,
        REDIS_URL=broker,
        MNEMOFLOW_API_KEYS=f"{TENANT_KEY}=alice",
        MNEMOFLOW_ADMIN_API_KEY=ADMIN_KEY,
    )
    name = f"reembed-{uuid.uuid4().hex[:6]}"
    worker_log = tmp_path / "worker.log"
    with running(worker_args(name, concurrency=2), env, worker_log) as worker:
        wait_for_worker(settings.model_copy(update={"redis_url": broker}), name, worker, log_path=worker_log)
        old_gateway, base = gateway(servers, env, tmp_path, "gateway-old")
        try:
            tenant = httpx.Client(base_url=base, headers={"x-api-key": TENANT_KEY}, timeout=60)
            admin = httpx.Client(base_url=base, headers={"x-api-key": ADMIN_KEY}, timeout=60)
            tenant.post("/memory/add", json={"content": "My dog loves running in the park"}).raise_for_status()
            items = [{"content": f"Sensor {i} reported a reading of {i * 7} units"} for i in range(120)]
            items.append({"content": "Quarterly revenue rose by four percent"})
            batch = tenant.post("/memory/batch", json={"items": items}).json()
            assert wait_for_job(tenant, batch["job_id"], "alice")["status"] == "succeeded"

            refused = tenant.post("/maintenance/reembed", json={"provider": "local"})
            assert refused.status_code == 403 and "MNEMOFLOW_ADMIN_API_KEY" in refused.json()["error"]["message"]
            bad = admin.post("/maintenance/reembed", json={"provider": "word2vec"})
            assert bad.status_code == 422

            started = admin.post("/maintenance/reembed", json={"provider": "local"})
            assert started.status_code == 202, started.text
            body = started.json()
            assert body["from"]["semantic"]["model"] == "synthetic-hash-v1" and body["to"]["model"].startswith(
                "all-MiniLM"
            )
            assert body["restart_with"] == "MNEMOFLOW_EMBEDDING_PROVIDER=local"
            again = admin.post("/maintenance/reembed", json={"provider": "local"})
            assert again.status_code in (409, 202)  # 409 while running; it may already be done on a fast machine
            job = _wait(admin, body["job_id"])
            assert job["status"] == "succeeded", job
            assert job["progress"]["done"] == job["progress"]["total"] == 122
            assert job["result"]["restart_with"] == "MNEMOFLOW_EMBEDDING_PROVIDER=local"

            # The old-model gateway: writes refused with the way forward, reads still answered.
            late = tenant.post("/memory/add", json={"content": "Written with the old model"})
            assert late.status_code == 409
            assert "Set MNEMOFLOW_EMBEDDING_PROVIDER=local" in late.json()["error"]["message"]
            assert tenant.post("/memory/query", json={"query": "revenue"}).status_code == 200
            # /health answers from a background reading (MNEMOFLOW_HEALTH_INTERVAL_SECONDS): wait for one taken
            # after the job finished before reading the store's model from it.
            health = _fresh_health(tenant, after=tenant.get("/health").json()["checked_at"])["embedding"]
            assert health["matches_store"] is False and health["store"]["model"].startswith("all-MiniLM")
        finally:
            old_gateway.__exit__(None, None, None)

        with db.session() as s:
            vectors = dict(
                s.execute(text("SELECT model, count(DISTINCT memory_id) FROM memory_vectors GROUP BY 1")).all()
            )
            memories = s.execute(text("SELECT count(*) FROM memories")).scalar_one()
            logged = s.execute(
                text("SELECT count(*) FROM embed_logs WHERE purpose = 'reembed' AND job_id = :j"),
                {"j": body["job_id"]},
            ).scalar_one()
        assert memories == 122 and list(vectors.values()) == [122]
        assert next(iter(vectors)).startswith("all-MiniLM")
        assert logged >= 1

        # Restarted with the new provider: meaning, not words, finds the memory.
        new_gateway, base = gateway(servers, {**env, "MNEMOFLOW_EMBEDDING_PROVIDER": "local"}, tmp_path, "gateway-new")
        try:
            tenant = httpx.Client(base_url=base, headers={"x-api-key": TENANT_KEY}, timeout=60)
            assert tenant.get("/health").json()["embedding"]["matches_store"] is True
            found = tenant.post("/memory/query", json={"query": "where does the canine like to play?", "k": 3}).json()
            assert found["matches"][0]["content"] == "My dog loves running in the park"
            assert tenant.post("/memory/add", json={"content": "Written with the new model"}).status_code == 200
            # The CLI on the client: nothing left to convert is the gateway's 409, printed readably.
            cli = CliRunner().invoke(
                app, ["reembed", "--provider", "local"], env={"MNEMOFLOW_URL": base, "MNEMOFLOW_API_KEY": ADMIN_KEY}
            )
            assert cli.exit_code == 1 and "error (409): the store already uses local model" in cli.output, cli.output
        finally:
            new_gateway.__exit__(None, None, None)


def _wait(client, job_id, timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/jobs/{job_id}").json()
        if job["status"] in ("succeeded", "failed"):
            return job
        time.sleep(0.3)
    raise AssertionError(f"re-embed job {job_id} did not finish: {job}")


def _fresh_health(client, *, after, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        health = client.get("/health").json()
        if health["checked_at"] != after:
            return health
        time.sleep(0.2)
    raise AssertionError(f"/health was not read again within {timeout} s (last reading {after})")
