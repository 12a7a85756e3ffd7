"""`mnemoflow up` under faults, with real processes: what crashes is started again (the rest left alone), a crash
loop ends everything, and Ctrl-C or `mnemoflow down` stop every child, whatever state it is in.

The first four tests share one stack, in order: three kill one of its children, the fourth stops it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid

import httpx
import psutil
import pytest

from infra.embedded import port_is_free
from tests.conftest import wait_for_job
from tests.faults.conftest import ROOT, RunningStack, gone, wait_until
from tests.integration.helpers import trickling

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(launch) -> RunningStack:
    # Private URLs: the Valkey test ingests a slow page served on loopback.
    running = launch("supervised", MNEMOFLOW_RESTART_DELAY_SECONDS="0.5", MNEMOFLOW_INGEST_ALLOW_PRIVATE_URLS="true")
    running.wait_ready()
    return running


def _restarted(stack: RunningStack, name: str, old_pid: int) -> int:
    """The new pid of `name`, once the supervisor has started it again."""
    return wait_until(lambda: (pid := stack.pids().get(name)) != old_pid and pid, f"{name} started again", stack)


def _batch_succeeds(stack: RunningStack, size: int = 40) -> None:
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    items = [{"content": f"Parcel {i} of the {tenant} order left the depot"} for i in range(size)]
    with httpx.Client(base_url=stack.url, timeout=30) as http:
        accepted = http.post("/memory/batch", json={"items": items, "user_id": tenant})
        assert accepted.status_code == 202, accepted.text
        job = wait_for_job(http, accepted.json()["job_id"], tenant)
    assert job["status"] == "succeeded" and job["result"]["created"] == size, job


def test_a_killed_worker_is_started_again_and_nothing_else_is(stack):
    before = stack.pids()
    worker = psutil.Process(before["worker"])
    pool = wait_until(lambda: {p.pid for p in worker.children(recursive=True)}, "the worker's pool processes", stack)

    os.kill(before["worker"], signal.SIGKILL)

    _restarted(stack, "worker", before["worker"])
    wait_until(lambda: all(gone(pid) for pid in pool), "the killed worker's pool processes gone", stack)
    _batch_succeeds(stack)
    after = stack.pids()
    assert {n: after[n] for n in before if n != "worker"} == {n: before[n] for n in before if n != "worker"}
    assert stack.process.poll() is None
    log_line = re.search(
        r"^restart: worker was killed by SIGKILL \(pid (\d+), .*\(attempt 1\)\. Its log: (.+)$", stack.output(), re.M
    )
    assert log_line and int(log_line[1]) == before["worker"], stack.output()
    assert log_line[2] == str(stack.data_dir / "logs" / "worker.log")


def test_a_killed_valkey_comes_back_on_the_same_port_and_health_recovers(stack):
    """Valkey killed mid-ingest: it comes back on its port and data, and the document being fetched when it died
    is stored whole, each chunk once (a worker that kombu stops on the lost connection is started again too)."""
    before = stack.state()
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    with trickling(seconds=8) as site, httpx.Client(base_url=stack.url, timeout=30) as http:
        accepted = http.post(
            "/memory/ingest/url",
            json={"url": f"{site}/tides", "user_id": tenant, "config": {"chunk_size": 48, "chunk_overlap": 8}},
        )
        assert accepted.status_code == 202, accepted.text
        document = accepted.json()["document_url"]
        wait_until(
            lambda: http.get(document, params={"user_id": tenant}).json()["status"] == "extracting",
            "the document being extracted",
            stack,
        )

        os.kill(before["children"]["valkey"]["pid"], signal.SIGKILL)

        _restarted(stack, "valkey", before["children"]["valkey"]["pid"])
        wait_until(stack.healthy, "/health ok again", stack)
        job = wait_for_job(http, accepted.json()["job_id"], tenant, timeout=180)
        done = http.get(document, params={"user_id": tenant, "limit": 500}).json()
    assert job["status"] == "succeeded", job
    assert done["status"] == "done" and done["chunk_count"] >= 3, done
    indexes = sorted(m["chunk_index"] for m in done["memories"])
    assert indexes == list(range(done["chunk_count"])) == list(range(done["memories_total"]))  # each chunk once
    after = stack.state()
    assert after["redis_url"] == before["redis_url"]
    assert {n: after["children"][n]["pid"] for n in ("gateway", "beat", "flower", "postgres")} == {
        n: before["children"][n]["pid"] for n in ("gateway", "beat", "flower", "postgres")
    }
    assert "restart: valkey was killed by SIGKILL" in stack.output()
    _batch_succeeds(stack)  # the workers found the broker again


def test_a_killed_postgres_comes_back_on_the_same_data_and_health_recovers(stack):
    before = stack.pids()

    os.kill(before["postgres"], signal.SIGKILL)

    _restarted(stack, "postgres", before["postgres"])
    wait_until(stack.healthy, "/health ok again", stack)
    assert {n: stack.pids()[n] for n in ("gateway", "beat", "flower", "valkey")} == {
        n: before[n] for n in ("gateway", "beat", "flower", "valkey")
    }
    assert "restart: postgres stopped running" in stack.output()
    _batch_succeeds(stack)


def test_ctrl_c_stops_every_child_even_a_hung_one_and_frees_the_ports(stack):
    state = stack.state()
    pids = stack.every_pid()
    ports = (stack.port, stack.flower_port, int(state["redis_url"].rsplit(":", 1)[1].split("/")[0]))
    os.kill(state["children"]["flower"]["pid"], signal.SIGSTOP)  # hung: it cannot act on SIGTERM

    os.killpg(stack.process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group

    assert stack.process.wait(timeout=120) == 0, stack.output()
    assert [pid for pid in pids if not gone(pid)] == []
    assert [port for port in ports if not port_is_free(port)] == []
    assert not (stack.data_dir / "stack.json").exists()
    assert re.search(r"^flower \(pid \d+\): not stopped after 5 s, killing it$", stack.output(), re.M)
    # Valkey, in a session of its own, was stopped by the supervisor after its clients, not by the Ctrl-C itself.
    valkey_log = (stack.data_dir / "valkey" / "valkey.log").read_text()
    assert "Received SIGTERM" in valkey_log and "Received SIGINT" not in valkey_log


def test_a_child_that_crashes_at_every_start_ends_in_a_crash_loop(launch):
    # Settings only the gateway's server reads: uvicorn exits at start when its TLS files do not exist.
    stack = launch(
        "crashloop",
        UVICORN_SSL_CERTFILE="/nonexistent/mnemoflow-test.crt",
        UVICORN_SSL_KEYFILE="/nonexistent/mnemoflow-test.key",
        MNEMOFLOW_RESTART_DELAY_SECONDS="0.2",
        MNEMOFLOW_CRASH_LOOP_CRASHES="3",
    )
    seen: set[int] = set()

    def ended() -> bool:
        seen.update(stack.every_pid())
        return stack.process.poll() is not None

    wait_until(ended, "the supervisor giving up", stack, timeout=180)

    assert stack.process.returncode == 1
    output = stack.output()
    assert len(re.findall(r"^restart: gateway exited with code 1 ", output, re.M)) == 2, output
    assert re.search(
        r"^error: gateway exited with code 1 \(pid \d+\); that is 3 crashes within 120 s: a crash loop, so Mnemoflow "
        rf"stops\. Its log: {re.escape(str(stack.data_dir / 'logs' / 'gateway.log'))}$",
        output,
        re.M,
    ), output
    assert "FileNotFoundError" in (stack.data_dir / "logs" / "gateway.log").read_text()
    assert seen and [pid for pid in seen if not gone(pid)] == []
    assert port_is_free(stack.port) and port_is_free(stack.flower_port)


def test_down_stops_what_a_killed_supervisor_left_running(launch):
    stack = launch("orphans")
    stack.wait_ready()
    state = stack.state()
    pids = stack.every_pid() - {stack.process.pid}
    ports = (stack.port, stack.flower_port, int(state["redis_url"].rsplit(":", 1)[1].split("/")[0]))
    os.kill(state["children"]["flower"]["pid"], signal.SIGSTOP)
    stack.process.kill()
    stack.process.wait()

    down = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "down", "--data-dir", str(stack.data_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )

    assert down.returncode == 0, down.stdout + down.stderr
    assert "the supervisor was gone" in down.stdout, down.stdout
    assert [pid for pid in pids if not gone(pid)] == []
    assert [port for port in ports if not port_is_free(port)] == []
    assert not (stack.data_dir / "stack.json").exists()
