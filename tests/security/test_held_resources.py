"""What one tenant's requests may hold, against a real closed gateway: a download the client abandons gives its
connection and its snapshot back, so other tenants are still served."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import text

from infra.embedded import free_port
from infra.processes import gateway_command, wait_healthy
from shared.db import schema_session
from tests.conftest import running, service_env, wait_for_job
from tests.security.conftest import Keys, client

pytestmark = pytest.mark.e2e

FULL = os.environ.get("MNEMOFLOW_TEST_FULL") == "1"
POOL = 5  # the gateway's request pool: a few leaked downloads would hold all of it


@pytest.fixture(scope="module")
def small_pool_gateway(servers, keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A closed gateway of its own with a small pool (a leak here must not starve the session's gateways)."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("logs") / "held-resources-gateway.log"
    env = service_env(
        servers,
        **keys.env(),
        MNEMOFLOW_GATEWAY_POOL_SIZE=str(POOL),
        MNEMOFLOW_GATEWAY_POOL_TIMEOUT_SECONDS="2",
        MNEMOFLOW_RATE_LIMITS_ENABLED="false",
    )
    with running(gateway_command(host="127.0.0.1", port=port), env, log_path) as proc:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc, log_path=log_path)
        yield url


def _start_download(url: str, key: str) -> socket.socket:
    """GET /export on a socket with a small receive buffer: the server soon blocks writing to it."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    sock.connect((host, int(port)))
    sock.sendall(f"GET /export HTTP/1.1\r\nHost: {host}\r\nx-api-key: {key}\r\n\r\n".encode())
    return sock


def _first_bytes(sock: socket.socket, read: int = 2048) -> bytes:
    received = b""
    while len(received) < read:
        piece = sock.recv(read - len(received))
        if not piece:
            break
        received += piece
    return received


def _abandoned_downloads(url: str, key: str, count: int) -> list[bytes]:
    """`count` downloads at once, each read for its first bytes and then hung up on, as clients that give up do."""
    sockets = [_start_download(url, key) for _ in range(count)]
    try:
        return [_first_bytes(sock) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _held_transactions(settings) -> list[str]:
    """States of the gateway connections that sit in a transaction with nothing running (a held snapshot)."""
    with schema_session(settings, "mnemoflow.tests.held") as session:
        return list(
            session.execute(
                text(
                    "SELECT state FROM pg_stat_activity WHERE datname = current_database() "
                    "AND application_name = 'mnemoflow.gateway' AND state LIKE 'idle in transaction%' "
                    "AND state_change < now() - interval '1 second'"
                )
            ).scalars()
        )


def test_abandoned_exports_give_their_connections_back(small_pool_gateway, worker, settings, keys: Keys):
    with client(small_pool_gateway, keys.key_a) as alice:
        items = [{"content": f"note {i}: the quarterly ledger of warehouse {i} balances"} for i in range(2_000)]
        job = alice.post("/memory/batch", json={"items": items}).json()
        assert wait_for_job(alice, job["job_id"], keys.tenant_a, timeout=300)["status"] == "succeeded"
        whole = alice.get("/export", params={"vectors": "true"})
        assert whole.status_code == 200 and len(whole.content) > 1_000_000  # far more than the socket buffers

    downloads, at_once = (100, 25) if FULL else (40, 20)
    answered = []
    for _ in range(downloads // at_once):  # more at once than the pool holds: the rest wait, or get a 503
        heads = _abandoned_downloads(small_pool_gateway, keys.key_a, at_once)
        answered += [head.split(b"\r\n", 1)[0] for head in heads]
    assert b"HTTP/1.1 200 OK" in answered, answered[:3]

    deadline = time.monotonic() + 30  # the gateway notices each hang-up as it writes its next piece
    while (held := _held_transactions(settings)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert held == [], f"{len(held)} gateway connections still hold a transaction after {downloads} abandoned exports"

    with client(small_pool_gateway, keys.key_b) as bob:
        for _ in range(2 * POOL):  # more requests than the pool has connections: each one's connection came back
            listed = bob.get("/memory/all", params={"l": 1})
            assert listed.status_code == 200, listed.text
        assert bob.get("/export").status_code == 200


def test_an_export_read_to_its_end_after_abandoned_ones_is_whole(small_pool_gateway, keys: Keys):
    with httpx.Client(base_url=small_pool_gateway, headers={"x-api-key": keys.key_b}, timeout=60) as bob:
        bob.post("/memory/add", json={"content": "Bob keeps his oars in the boathouse"}).raise_for_status()
        _abandoned_downloads(small_pool_gateway, keys.key_b, 3)
        lines = [json.loads(line) for line in bob.get("/export").text.splitlines()]
        assert lines[0]["type"] == "header" and lines[-1]["type"] == "end" and lines[-1]["memories"] >= 1
