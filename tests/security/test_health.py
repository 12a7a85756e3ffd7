"""`/health` on a broker of its own, against a real closed gateway and real workers: not ok (503, Retry-After) while a
work queue has no ready process, and read in the background, not per call."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from infra.embedded import free_port
from infra.processes import gateway_command, wait_healthy
from shared.config import Settings
from shared.jobs import ALL_QUEUES, Queue
from tests.conftest import running, service_env, wait_for_worker, worker_args
from tests.security.conftest import Keys, client

pytestmark = pytest.mark.e2e

BROKER_DB = 7  # no other test's workers report here


def _broker(servers) -> str:
    return servers["redis_url"].rsplit("/", 1)[0] + f"/{BROKER_DB}"


@pytest.fixture(scope="module")
def lonely_gateway(servers, keys: Keys, tmp_path_factory) -> Iterator[str]:
    """A closed gateway on a broker database no worker of the session serves, reading its health every second."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("logs") / "health-gateway.log"
    env = service_env(servers, **keys.env(), REDIS_URL=_broker(servers), MNEMOFLOW_HEALTH_INTERVAL_SECONDS="1")
    with running(gateway_command(host="127.0.0.1", port=port), env, log_path) as proc:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc, log_path=log_path)  # serves: the database and the broker answer
        yield url


def _until(predicate, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError("condition not reached in time")


def test_health_is_not_ok_until_every_work_queue_has_a_ready_process(
    lonely_gateway, servers, keys: Keys, tmp_path_factory
):
    with client(lonely_gateway) as stranger, client(lonely_gateway, keys.admin) as operator:
        nobody = stranger.get("/health")
        assert nobody.status_code == 503 and int(nobody.headers["Retry-After"]) >= 1
        expected = {"ok": False, "database": {"ok": True}, "broker": {"ok": True}, "workers": {"ok": False}}
        assert nobody.json() == expected
        assert operator.get("/health").json()["workers"]["idle_queues"] == list(ALL_QUEUES)

        env = service_env(servers, REDIS_URL=_broker(servers))
        settings = Settings(database_url=servers["database_url"], redis_url=_broker(servers))
        logs = tmp_path_factory.mktemp("logs")
        # only the sweeper: the queues that store memories and documents have no one
        with running(worker_args("health-sweep", (Queue.SWEEP,), concurrency=1), env, logs / "sweep.log") as proc:
            wait_for_worker(settings, "health-sweep", proc, log_path=logs / "sweep.log")
            idle = _until(
                lambda: (w := operator.get("/health").json()["workers"])["queues"].get(Queue.SWEEP) and w["idle_queues"]
            )
            assert set(idle) == set(ALL_QUEUES) - {Queue.SWEEP}
            assert stranger.get("/health").status_code == 503
            rest = tuple(q for q in ALL_QUEUES if q != Queue.SWEEP)
            with running(worker_args("health-rest", rest, concurrency=1), env, logs / "rest.log") as other:
                wait_for_worker(settings, "health-rest", other, log_path=logs / "rest.log")
                served = _until(lambda: (r := stranger.get("/health")).status_code == 200 and r)
                assert served.json()["ok"] is True and "Retry-After" not in served.headers
                assert operator.get("/health").json()["workers"]["idle_queues"] == []


def test_a_probe_reads_the_last_reading_instead_of_asking_the_servers(servers, keys: Keys, tmp_path_factory):
    port = free_port()
    log_path = tmp_path_factory.mktemp("logs") / "health-slow-gateway.log"
    env = service_env(servers, **keys.env(), REDIS_URL=_broker(servers), MNEMOFLOW_HEALTH_INTERVAL_SECONDS="60")
    with running(gateway_command(host="127.0.0.1", port=port), env, log_path) as proc:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc, log_path=log_path)
        with client(url, keys.admin) as operator, client(url) as stranger:
            first = operator.get("/health").json()["checked_at"]
            for _ in range(200):  # a flood of anonymous probes
                assert stranger.get("/health").status_code == 503
            assert operator.get("/health").json()["checked_at"] == first  # one reading served them all
