"""The gateway as several processes (services/gateway/serve.py): /metrics sums every process's counts, a process
that dies is replaced and what it counted stays in the sums, and a configuration that would open more database
connections than PostgreSQL allows does not start."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from infra.embedded import free_port
from infra.processes import gateway_command, wait_healthy
from tests.conftest import running, service_env

pytestmark = pytest.mark.e2e

ROUTE = "/sectors"


def serving(launcher: subprocess.Popen[bytes]) -> list[psutil.Process]:
    """The launcher's uvicorn processes (spawned children; not multiprocessing's resource tracker), alive: not
    zombies waiting for the launcher to reap them."""
    found = []
    for child in psutil.Process(launcher.pid).children():
        try:
            if not dead(child) and "spawn_main" in " ".join(child.cmdline()):
                found.append(child)
        except (psutil.ZombieProcess, psutil.NoSuchProcess):  # died since `dead` looked
            continue
    return found


def dead(process: psutil.Process) -> bool:
    """Gone, or a zombie (its command line can no longer be read)."""
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except (psutil.ZombieProcess, psutil.NoSuchProcess):
        return True


def wait_for_processes(launcher: subprocess.Popen[bytes], count: int, timeout: float = 120) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = serving(launcher)
        if len(found) == count:
            return found
        time.sleep(0.2)
    raise AssertionError(f"expected {count} gateway processes, found {len(serving(launcher))}")


def requests_counted(base: str, route: str) -> float:
    """mnemoflow_http_requests_total for `route`, every method and status, as /metrics reports it."""
    text = httpx.get(f"{base}/metrics", timeout=30).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "mnemoflow_http_requests"
        for sample in family.samples
        if sample.name == "mnemoflow_http_requests_total" and sample.labels.get("route") == route
    )


def send(base: str, tenant: str, n: int) -> None:
    """`n` requests, each on a connection of its own (a kept-alive connection stays with one process)."""
    for _ in range(n):
        assert httpx.get(f"{base}{ROUTE}", params={"user_id": tenant}, timeout=30).status_code == 200


@pytest.fixture
def two_processes(servers, tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    port = free_port()
    metrics_dir = tmp_path / "metrics"
    env = service_env(servers, MNEMOFLOW_GATEWAY_METRICS_DIR=str(metrics_dir))
    log_path = tmp_path / "gateway.log"
    with running(gateway_command(host="127.0.0.1", port=port, workers=2), env, log_path) as launcher:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base, launcher, log_path=log_path)
        wait_for_processes(launcher, 2)
        yield base, launcher, metrics_dir


def test_metrics_sum_the_requests_every_process_answered(two_processes, tenant):
    base, launcher, metrics_dir = two_processes
    first, second = wait_for_processes(launcher, 2)
    # A stopped process accepts nothing: each half of the requests goes to one process, whichever it is.
    for stopped, count in ((second, 7), (first, 5)):
        os.kill(stopped.pid, signal.SIGSTOP)
        try:
            send(base, tenant, count)
        finally:
            os.kill(stopped.pid, signal.SIGCONT)

    assert requests_counted(base, ROUTE) == 12
    assert requests_counted(base, ROUTE) == 12  # a second scrape, perhaps answered by the other process
    writers = {path.stem.rsplit("_", 1)[1] for path in metrics_dir.glob("counter_*.db")}
    assert {str(first.pid), str(second.pid)} <= writers


def test_a_killed_process_is_replaced_and_its_counts_stay(two_processes, tenant):
    base, launcher, _ = two_processes
    send(base, tenant, 6)
    victim = wait_for_processes(launcher, 2)[0]
    victim.kill()
    # Dead at once; reaped (and replaced) when the launcher's supervisor next checks its processes, which on a
    # loaded machine once took over 30 s (CI): `serving` leaves zombies out, so the replacement is what is waited for.
    deadline = time.monotonic() + 30
    while not dead(victim):
        assert time.monotonic() < deadline, "the gateway process did not die of SIGKILL"
        time.sleep(0.05)

    deadline = time.monotonic() + 120
    while victim.pid in (pids := {p.pid for p in serving(launcher)}) or len(pids) < 2:
        assert time.monotonic() < deadline, "the killed gateway process was not replaced"
        time.sleep(0.2)
    wait_healthy(base, launcher)
    send(base, tenant, 4)
    assert requests_counted(base, ROUTE) == 10


@pytest.mark.parametrize(
    ("settings", "beside", "named"),
    [
        ({"MNEMOFLOW_GATEWAY_WORKERS": "64", "MNEMOFLOW_GATEWAY_POOL_SIZE": "100"}, 0, "64 gateway processes"),
        ({"MNEMOFLOW_GATEWAY_WORKERS": "1"}, 30, "30 worker processes"),  # mnemoflow up's worker and sweeper
    ],
)
def test_more_connections_than_postgresql_allows_refuse_to_start(servers, tmp_path: Path, settings, beside, named):
    env = service_env(servers, **settings)
    log_path = tmp_path / "gateway.log"
    command = gateway_command(host="127.0.0.1", port=free_port(), beside_worker_processes=beside)
    with running(command, env, log_path) as launcher:
        code = launcher.wait(timeout=60)
    log = log_path.read_text()
    assert code != 0, log
    assert "refusing to start the gateway" in log and "max_connections" in log and named in log, log
    assert "MNEMOFLOW_GATEWAY_WORKERS" in log and "MNEMOFLOW_GATEWAY_POOL_SIZE" in log, log
