"""The broker is not an authority: a message pushed into it by anything but Mnemoflow's own senders (here, straight
into Valkey's lists with redis-py, as a local process with the broker's password can) is refused by a real worker
before its task runs, and has no effect on the database; a message Mnemoflow signed runs."""

from __future__ import annotations

import base64
import json
import secrets
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from sqlalchemy import text

from infra.embedded import free_port
from shared.jobs import RunDecayCycle, StoreChunk, TaskName
from shared.queueing import make_celery, send, unacked_key
from shared.security.signing import SIGNATURE_HEADER, sign
from tests.conftest import TEST_SIGNING_KEY, running, service_env, wait_for_worker, worker_args
from tests.integration.helpers import job_state, make_job, memory_count, wait_until
from tests.integration.test_worker_metrics import scrape, total

pytestmark = pytest.mark.integration

OTHER_KEY = b"not-the-deployment-key-0123456789"
DECAY_RUN_IDS = uuid.UUID("6d6e656d-6f66-6c6f-7764-656361790000")  # workers/tasks.py: a scheduled run's id


def envelope(
    task: str, kwargs: dict[str, Any], queue: str, headers: dict[str, Any] | None = None, task_id: str | None = None
) -> tuple[str, str]:
    """A Celery (protocol 2) message as kombu's Redis transport stores it, and its task id: what a process holding
    only the broker's password can write."""
    task_id = task_id or str(uuid.uuid4())
    body = json.dumps([[], kwargs, {"callbacks": None, "errbacks": None, "chain": None, "chord": None}])
    message = {
        "body": base64.b64encode(body.encode()).decode(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {
            "lang": "py",
            "task": task,
            "id": task_id,
            "root_id": task_id,
            "parent_id": None,
            "group": None,
            "retries": 0,
            "eta": None,
            "expires": None,
            "timelimit": [None, None],
            "argsrepr": "()",
            "kwargsrepr": "{}",
            "origin": "gen1@attacker",
            "ignore_result": True,
            **(headers or {}),
        },
        "properties": {
            "correlation_id": task_id,
            "reply_to": "",
            "delivery_mode": 2,
            "delivery_info": {"exchange": "mnemoflow", "routing_key": queue},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": str(uuid.uuid4()),
        },
    }
    return json.dumps(message), task_id


def message_id(raw: bytes) -> str:
    """The task id of a message the broker holds: queued as the message, unacknowledged as [message, exchange, key]."""
    held = json.loads(raw)
    return str((held[0] if isinstance(held, list) else held)["headers"]["id"])


def test_forged_messages_are_refused_by_a_real_worker_and_a_signed_one_runs(
    app_db, maintenance, servers, settings, tmp_path: Path
) -> None:
    broker = servers["redis_url"].rsplit("/", 1)[0] + "/14"  # a broker database of its own
    client = redis.Redis.from_url(broker)
    client.flushdb()
    victim, sender = f"victim-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    secret = "the victim's secret diary entry"
    unsigned_job = make_job(app_db, victim, [{"content": f"{secret} (unsigned)"}])
    other_key_job = make_job(app_db, victim, [{"content": f"{secret} (signed with another key)"}])
    copied_job = make_job(app_db, victim, [{"content": f"{secret} (a signature copied from another message)"}])
    replayed_job = make_job(app_db, victim, [{"content": f"{secret} (a signed message under another id)"}])
    signed_job = make_job(app_db, sender, [{"content": "a note Mnemoflow itself sent"}])
    untouched = {
        job_id: job_state(app_db.bound(victim), job_id)
        for job_id in (unsigned_job, other_key_job, copied_job, replayed_job)
    }

    def chunk(job_id: uuid.UUID, user_id: str = victim) -> dict[str, Any]:
        return StoreChunk(job_id=job_id, seq=0, sector="semantic", user_id=user_id).kwargs()

    queue = "embed.semantic"
    genuine = TEST_SIGNING_KEY.encode()

    def signed(key: bytes, task_id: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {SIGNATURE_HEADER: sign(key, task_id, TaskName.STORE_CHUNK, [], kwargs)}

    ids = [str(uuid.uuid4()) for _ in range(4)]
    forged = [
        envelope(TaskName.STORE_CHUNK, chunk(unsigned_job), queue, task_id=ids[0]),
        envelope(
            TaskName.STORE_CHUNK, chunk(other_key_job), queue, signed(OTHER_KEY, ids[1], chunk(other_key_job)), ids[1]
        ),
        # A genuine signature (of the sender's own chunk, as a captured message carries it) on another tenant's
        # arguments; and a genuine message of the victim's replayed under an id of its own.
        envelope(
            TaskName.STORE_CHUNK, chunk(copied_job), queue, signed(genuine, ids[2], chunk(signed_job, sender)), ids[2]
        ),
        envelope(
            TaskName.STORE_CHUNK, chunk(replayed_job), queue, signed(genuine, ids[0], chunk(replayed_job)), ids[3]
        ),
    ]
    decay, decay_id = envelope(RunDecayCycle.task, RunDecayCycle(trigger="operator").kwargs(), "maintenance")
    for message, _ in forged:
        client.lpush(queue, message)
    client.lpush("maintenance", decay)

    port = free_port()
    env = service_env(
        servers,
        REDIS_URL=broker,
        MNEMOFLOW_WORKER_METRICS_PORT=str(port),
        MNEMOFLOW_WORKER_METRICS_DIR=str(tmp_path / "metrics"),
    )
    name = f"forged-{uuid.uuid4().hex[:6]}"
    url = f"http://127.0.0.1:{port}/metrics"
    log_path = tmp_path / "worker.log"
    isolated = settings.model_copy(update={"redis_url": broker})
    app = make_celery(isolated, "tests.broker")
    try:
        with running(worker_args(name, queues=(queue, "maintenance"), concurrency=1), env, log_path) as proc:
            wait_for_worker(isolated, name, proc, log_path=log_path)
            send(app, StoreChunk(job_id=signed_job, seq=0, sector="semantic", user_id=sender))
            wait_until(lambda: job_state(app_db.bound(sender), signed_job)["status"] == "succeeded")
            samples = wait_until(
                lambda: (s := scrape(url)) and total(s, "mnemoflow_worker_refused_messages_total") == 5 and s
            )
    finally:
        app.close()

    refused = "mnemoflow_worker_refused_messages_total"
    assert total(samples, refused, task=TaskName.STORE_CHUNK, reason="bad signature") == 3
    assert total(samples, refused, task=TaskName.STORE_CHUNK, reason="unsigned") == 1
    assert total(samples, refused, task=TaskName.DECAY_CYCLE, reason="unsigned") == 1
    # Nothing of theirs ran: the victim's jobs untouched and no memory stored, no decay run recorded.
    assert {job_id: job_state(app_db.bound(victim), job_id) for job_id in untouched} == untouched
    assert memory_count(app_db, victim) == 0 and memory_count(app_db, sender) == 1
    with maintenance.session() as s:
        run = uuid.uuid5(DECAY_RUN_IDS, decay_id)
        assert s.execute(text("SELECT count(*) FROM decay_runs WHERE id = :id"), {"id": run}).scalar_one() == 0
    # Acknowledged, not requeued nor retried: the broker holds none of them any more (what it holds is the signed
    # chunk's own follow-up, a merge of the fresh vectors).
    held = [*client.lrange(queue, 0, -1), *client.lrange("maintenance", 0, -1), *client.hvals(unacked_key({}))]
    left = {message_id(raw) for raw in held}
    assert left.isdisjoint({task_id for _, task_id in forged} | {decay_id})
    # Logged by task and id, never by what they carried.
    log = log_path.read_text()
    assert all(task_id in log for _, task_id in forged) and decay_id in log
    assert victim not in log and secret not in log


def test_the_broker_refuses_a_client_without_its_password(servers):
    with_password = redis.Redis.from_url(servers["redis_url"])
    assert with_password.ping()
    port = with_password.connection_pool.connection_kwargs["port"]
    for anonymous in (
        redis.Redis(host="127.0.0.1", port=port),
        redis.Redis(host="127.0.0.1", port=port, password="a-guess-at-the-password"),
    ):
        with pytest.raises(redis.AuthenticationError):
            anonymous.lpush("embed.semantic", "forged")
    assert with_password.llen("embed.semantic") == 0


@pytest.mark.parametrize("environment", ["production", "development"])
def test_flower_serves_its_metrics_and_health_only_with_its_login_and_signs_nothing(
    servers, tmp_path: Path, environment: str
) -> None:
    login = "admin:" + uuid.uuid4().hex
    port = free_port()
    broker = servers["redis_url"].rsplit("/", 1)[0] + "/15"
    client = redis.Redis.from_url(broker)
    client.flushdb()
    env = service_env(
        servers,
        REDIS_URL=broker,
        FLOWER_BASIC_AUTH=login,
        MNEMOFLOW_ENVIRONMENT=environment,
        MNEMOFLOW_API_KEYS=f"{secrets.token_urlsafe(24)}=alice",
        MNEMOFLOW_ADMIN_API_KEY=secrets.token_urlsafe(24),
    )
    if environment == "production":
        env.pop("MNEMOFLOW_SIGNING_KEY")  # it sends no task: in production it starts without the key
    base = f"http://127.0.0.1:{port}"
    with running(["workers.flower", f"--port={port}", "--address=127.0.0.1"], env, tmp_path / "flower.log"):
        user, password = login.split(":", 1)

        def answers() -> httpx.Response | None:
            try:
                return httpx.get(f"{base}/healthcheck", auth=(user, password), timeout=5)
            except httpx.HTTPError:
                return None

        assert wait_until(answers, timeout=60).status_code == 200
        for path in ("/metrics", "/healthcheck", "/api/workers"):
            assert httpx.get(f"{base}{path}", timeout=5).status_code == 401, path
            assert httpx.get(f"{base}{path}", auth=(user, "wrong"), timeout=5).status_code == 401, path
        metrics = httpx.get(f"{base}/metrics", auth=(user, password), timeout=5)
        assert metrics.status_code == 200 and "flower_" in metrics.text
        # A task its API is asked to send goes unsigned, even where the key is at hand (development): refused.
        sent = httpx.post(f"{base}/api/task/send-task/{TaskName.SWEEP_JOBS}", json={}, auth=(user, password))
        assert sent.status_code == 200, sent.text
    (queued,) = client.lrange("sweep", 0, -1)
    assert message_id(queued) == sent.json()["task-id"]
    assert SIGNATURE_HEADER not in json.loads(queued)["headers"]
