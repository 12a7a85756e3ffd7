"""Flower, run as `mnemoflow up` and compose run it (`celery -A workers.app flower`), against a real worker: each
chunk shows under a name naming its sector's queue (shared.queueing.send's `shadow`), and the broker view lists
every queue with its length."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
import redis

from infra.embedded import free_port
from shared.jobs import ALL_QUEUES, StoreChunk, TaskName
from shared.queueing import make_celery, send
from tests.conftest import running, service_env, wait_for_worker, worker_args
from tests.integration.helpers import job_state, make_job, wait_until

pytestmark = pytest.mark.integration


def get(url: str) -> httpx.Response | None:
    try:
        answer = httpx.get(url, timeout=5)
    except httpx.HTTPError:
        return None
    return answer if answer.status_code == 200 else None


def lengths(flower: str) -> dict[str, int] | None:
    answer = get(f"{flower}/api/queues/length")
    return {q["name"]: q["messages"] for q in answer.json()["active_queues"]} if answer else None


def test_flower_names_each_chunk_by_its_sector_queue_and_lists_every_queue(
    db, servers, settings, tenant, tmp_path: Path
) -> None:
    broker = servers["redis_url"].rsplit("/", 1)[0] + "/9"  # a broker database of its own
    redis.Redis.from_url(broker).flushdb()
    isolated = settings.model_copy(update={"redis_url": broker})
    env = service_env(servers, REDIS_URL=broker, FLOWER_UNAUTHENTICATED_API="true")
    port = free_port()
    flower = f"http://127.0.0.1:{port}"
    command = ["workers.flower", f"--port={port}", "--address=127.0.0.1"]
    app = make_celery(isolated, "tests.flower")
    name = f"flower-{uuid.uuid4().hex[:6]}"
    try:
        with running(command, env, tmp_path / "flower.log"):
            # No worker yet: Flower lists the declared queues, each with its length in the broker.
            assert wait_until(lambda: lengths(flower), timeout=60) == dict.fromkeys(ALL_QUEUES, 0)
            jobs = {
                sector: make_job(db, tenant, [{"content": f"A {sector} note about herons"}], sector=sector)
                for sector in ("emotional", "procedural", "semantic")
            }
            for sector, job_id in jobs.items():
                send(app, StoreChunk(job_id=job_id, seq=0, sector=sector, user_id=tenant))
            waiting = wait_until(lambda: (q := lengths(flower)) and q["embed.emotional"] and q)
            assert waiting["embed.emotional"] == 1 and waiting["embed.procedural"] == 1 and waiting["ingest"] == 0

            log_path = tmp_path / "worker.log"
            with running(worker_args(name), service_env(servers, REDIS_URL=broker), log_path) as proc:
                wait_for_worker(isolated, name, proc, log_path=log_path)
                for job_id in jobs.values():
                    wait_until(lambda job_id=job_id: job_state(db, job_id)["status"] == "succeeded")

                def shown() -> dict | None:
                    answer = get(f"{flower}/api/tasks?limit=100")
                    tasks = answer.json() if answer else {}
                    done = [t for t in tasks.values() if t["state"] == "SUCCESS"]
                    return tasks if len([t for t in done if "store_chunk" in t["name"]]) >= len(jobs) else None

                tasks = wait_until(shown, timeout=60)
                names = sorted(t["name"] for t in tasks.values() if "store_chunk" in t["name"])
                assert names == [f"{TaskName.STORE_CHUNK}@embed.{s}" for s in ("emotional", "procedural", "semantic")]
                assert all(t["worker"].startswith(f"{name}@") for t in tasks.values())

                # Once Flower knows the workers, it lists the queues they consume: all of them here.
                assert get(f"{flower}/api/workers?refresh=1") is not None
                assert wait_until(lambda: lengths(flower), timeout=30) == dict.fromkeys(ALL_QUEUES, 0)
    finally:
        app.close()
