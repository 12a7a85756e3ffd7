"""Many more concurrent queries than the gateway has connections: every one answered, none a 5xx.

A query's full-text stage runs beside it on a second connection. When that connection came from the query's
own pool, enough concurrent queries each held one connection while waiting for a second: a deadlock until the
pool timeout, then errors. The gateway here has the smallest pool (1 + 1 connections), so that shows at once;
the queries' full-text stages have a pool of their own.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx
import pytest

from infra.embedded import free_port
from infra.processes import gateway_command, wait_healthy
from tests.conftest import running, service_env

pytestmark = pytest.mark.e2e

CONCURRENT = 64
ROUNDS = 3


@pytest.fixture(scope="module")
def small_pool_gateway(servers, tmp_path_factory):
    port = free_port()
    env = service_env(servers, MNEMOFLOW_GATEWAY_POOL_SIZE="1", MNEMOFLOW_GATEWAY_POOL_TIMEOUT_SECONDS="10")
    log_path = tmp_path_factory.mktemp("logs") / "small-pool.log"
    with running(gateway_command(host="127.0.0.1", port=port), env, log_path) as proc:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc, log_path=log_path)
        yield url


def test_64_concurrent_queries_on_a_pool_of_2_connections_all_succeed(small_pool_gateway, tenant):
    with httpx.Client(base_url=small_pool_gateway, timeout=30) as client:
        for i in range(12):
            added = client.post(
                "/memory/add", json={"content": f"harbour note {i}: the ferry leaves at {i}", "user_id": tenant}
            )
            assert added.status_code == 200, added.text

    async def fire() -> Counter[int]:
        limits = httpx.Limits(max_connections=CONCURRENT, max_keepalive_connections=CONCURRENT)
        statuses: Counter[int] = Counter()
        for round_ in range(ROUNDS):
            # A client per round: the round's 64 queries share one database connection, so on a slow machine a
            # round outlasts the server's keep-alive (5 s), and a connection that answered early, reused by the
            # next round, was closed under it (a ReadError on the client's side, not an answer of the server's).
            async with httpx.AsyncClient(base_url=small_pool_gateway, timeout=60, limits=limits) as client:
                answers = await asyncio.gather(
                    *(
                        client.post(
                            "/memory/query",
                            json={"query": f"when does the ferry leave? ({round_}.{i})", "user_id": tenant},
                        )
                        for i in range(CONCURRENT)
                    )
                )
            statuses.update(answer.status_code for answer in answers)
            assert all(a.json()["matches"] for a in answers if a.status_code == 200)
        return statuses

    statuses = asyncio.run(fire())
    assert statuses == Counter({200: CONCURRENT * ROUNDS}), statuses
