"""Many clients: adds per second and query latency with 1, 8 and 32 concurrent clients, against a gateway of one
process (the baseline) and one of MNEMOFLOW_GATEWAY_WORKERS processes (default: one per two usable cores, 1 to 4),
in the same run; it asserts nothing.

Each configuration gets a stack of its own (fresh database, the gateway, one worker on every queue) with the
default settings: the `local` model, reinforcement on. Each client is a tenant of its own and sends what
OpenMemory's client sends: `content` and `user_id` to /memory/add, `query`, `k` and `user_id` to /memory/query,
back to back for a fixed time. Before the adds, every tenant gets a batch of memories (the workers embed them), so
that each query has something to find. Answers are counted by status: a 5xx is a failure of the stack.

    python -m bench.clients                      # 20 s per phase
    python -m bench.clients --seconds 10 --workers 2

The clients run in this process, on the same cores as the stack: the latencies include the client's share of the
CPU. RSS is each gateway process's resident memory after the run (the local model loaded).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import psutil
import redis

from bench.common import corpus, fresh_database, percentiles, servers, stack
from bench.load import OpStats, question, seed, timed
from shared.config import Settings

CLIENTS = (1, 8, 32)
SEED_PER_TENANT = 30
K = 5
TEXTS = corpus(1000, seed=11)


@dataclass
class Phase:
    kind: str  # add or query
    clients: int
    seconds: float
    stats: OpStats

    @property
    def per_second(self) -> float:
        return len(self.stats.latencies_ms) / self.seconds

    @property
    def p95(self) -> float:
        return percentiles(self.stats.latencies_ms)["p95"] if self.stats.latencies_ms else float("nan")


@dataclass
class Run:
    processes: int
    phases: list[Phase]
    rss_mb: list[float]


async def client_loop(
    client: httpx.AsyncClient, kind: str, tenant: str, until: float, stats: OpStats, rng: random.Random
) -> None:
    n = 0
    while time.monotonic() < until:
        n += 1
        if kind == "add":
            body = {"content": f"{rng.choice(TEXTS)} ({tenant}, {n})", "user_id": tenant}
            await timed(client, stats, "POST", "/memory/add", json=body)
        else:
            body = {"query": question(rng), "k": K, "user_id": tenant}
            await timed(client, stats, "POST", "/memory/query", json=body)


async def phase(base: str, kind: str, tenants: list[str], seconds: float) -> Phase:
    stats = OpStats()
    limits = httpx.Limits(max_connections=len(tenants) + 4)
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client:
        until = time.monotonic() + seconds
        started = time.monotonic()
        await asyncio.gather(
            *(client_loop(client, kind, t, until, stats, random.Random(i)) for i, t in enumerate(tenants))
        )
        elapsed = time.monotonic() - started
    return Phase(kind, len(tenants), elapsed, stats)


async def measure(base: str, seconds: float, run: str) -> list[Phase]:
    tenants = [f"clients-{run}-{i}" for i in range(max(CLIENTS))]
    async with httpx.AsyncClient(base_url=base, timeout=120) as client:
        await seed(client, tenants, SEED_PER_TENANT, timeout=900)
    phases = []
    for kind in ("add", "query"):
        for clients in CLIENTS:
            result = await phase(base, kind, tenants[:clients], seconds)
            print(f"    {kind:5} {clients:>2} clients: {described(result)}", flush=True)
            phases.append(result)
    return phases


def gateway_processes(port: int) -> list[psutil.Process]:
    """The processes that serve the gateway on `port`: the launcher, or its uvicorn processes when it has some."""
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "services.gateway.serve" in cmdline and str(port) in cmdline:
            children = [c for c in proc.children() if "spawn_main" in " ".join(c.cmdline())]
            return children or [proc]
    return []


@contextlib.contextmanager
def configuration(admin_url: str, redis_url: str, processes: int) -> Iterator[str]:
    redis.Redis.from_url(redis_url).flushdb()  # no query embeddings cached by the previous configuration
    database_url = fresh_database(admin_url, f"bench_clients_{processes}")
    with stack(database_url, redis_url, gateway_workers=processes) as base:
        yield base


def described(result: Phase) -> str:
    stats = result.stats
    refused = {s: n for s, n in stats.statuses.items() if 400 <= s < 500}
    return (
        f"{result.per_second:7.1f}/s  p95 {result.p95:7.1f} ms  ({stats.requests} requests, 5xx {stats.server_errors},"
        f" transport errors {dict(stats.transport) or 0}{', 4xx ' + str(refused) if refused else ''})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="each phase's length [20]")
    parser.add_argument("--workers", type=int, help="the gateway's processes to compare with one [the default]")
    args = parser.parse_args()
    os.environ.setdefault("MNEMOFLOW_EMBEDDING_PROVIDER", "local")  # the product's default (stack: synthetic)
    many = args.workers or Settings(_env_file=None).gateway_processes
    print(f"[clients] load average {os.getloadavg()}, {psutil.cpu_count()} cores", flush=True)
    runs = []
    with servers() as srv:
        for processes in dict.fromkeys((1, many)):
            print(f"  gateway of {processes} process(es):", flush=True)
            with configuration(srv.admin_url, srv.redis_url, processes) as base:
                phases = asyncio.run(measure(base, args.seconds, uuid.uuid4().hex[:6]))
                port = int(base.rsplit(":", 1)[1])
                rss = [p.memory_info().rss / 2**20 for p in gateway_processes(port)]
            runs.append(Run(processes, phases, rss))
    print(f"\n[clients] load average {os.getloadavg()}")
    print("| gateway processes | clients | adds/s | add p95 (ms) | queries/s | query p95 (ms) | 5xx |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for run in runs:
        adds = {p.clients: p for p in run.phases if p.kind == "add"}
        queries = {p.clients: p for p in run.phases if p.kind == "query"}
        for clients in CLIENTS:
            a, q = adds[clients], queries[clients]
            errors = a.stats.server_errors + q.stats.server_errors
            print(
                f"| {run.processes} | {clients} | {a.per_second:.1f} | {a.p95:.0f} | {q.per_second:.1f} | "
                f"{q.p95:.0f} | {errors} |"
            )
    for run in runs:
        print(f"RSS of each of the {run.processes} gateway process(es): {', '.join(f'{m:.0f} MB' for m in run.rss_mb)}")


if __name__ == "__main__":
    main()
