"""A bounded load test of a whole stack on this machine (loopback only): it starts its own PostgreSQL, Valkey,
gateway and worker, as the other benchmarks do, and prints figures; it asserts nothing.

1. concurrent queries: 64 clients querying one gateway process at once, back to back: answers by status (a 5xx
   is a failure of the stack), p50/p95/p99;
2. mixed: N clients (default 50) for T minutes (default 10), each a tenant of its own, each choosing query, add,
   batch or ingest at random: error rate and p50/p95/p99 per operation; then whether the queues drained (every
   job succeeded, every broker queue empty) and whether any acknowledged memory was lost or stored twice;
3. two tenants: how long tenant B's small batch takes alone, and while tenant A's large batch (50,000 items)
   runs.

    python -m bench.load                 # 64 concurrent queries, 50 clients x 10 minutes, a 50k batch
    python -m bench.load --quick         # a short run: 20 clients x 1 minute, a 5k batch

The load comes from this process, on the same cores as the stack: the latencies include the client's share of
the CPU. A 429 (a tenant's rate limit) is counted apart from errors; each client being a tenant of its own, the
default limits should not show any.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

import httpx
import psycopg
import redis

from bench.common import OBJECTS, SUBJECTS, corpus, fresh_database, percentiles, plain_dsn, servers, stack
from shared.config import Settings
from shared.jobs import ALL_QUEUES, MergeFresh
from shared.queueing import make_celery, send

ENDED = ("succeeded", "failed", "cancelled")
MIX = {"query": 0.60, "add": 0.25, "batch": 0.10, "ingest": 0.05}  # what a mixed client does next


@dataclass(frozen=True)
class Profile:
    query_clients: int = 64
    queries_per_client: int = 50
    seed_per_tenant: int = 200  # memories each query tenant holds before the queries
    clients: int = 50
    minutes: float = 10.0
    batch_items: tuple[int, int] = (10, 50)  # a mixed client's batch: between these many items
    large_batch: int = 50_000
    small_batch: int = 100
    drain_timeout_seconds: float = 900.0


QUICK = Profile(
    queries_per_client=10, seed_per_tenant=50, clients=20, minutes=1.0, large_batch=5_000, drain_timeout_seconds=300
)


@dataclass
class OpStats:
    """What one kind of request got: statuses, transport errors, latencies of the answered ones."""

    statuses: Counter[int] = field(default_factory=Counter)
    transport: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)

    @property
    def requests(self) -> int:
        return sum(self.statuses.values()) + sum(self.transport.values())

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)

    @property
    def throttled(self) -> int:
        return self.statuses[429]

    @property
    def errors(self) -> int:
        """5xx, transport failures and any 4xx but 429: nothing this script sends should be refused."""
        refused = sum(n for status, n in self.statuses.items() if 400 <= status < 500 and status != 429)
        return self.server_errors + refused + sum(self.transport.values())


@dataclass
class Drain:
    """The end of a run: did every job succeed and every queue empty, and were memories kept exactly once."""

    jobs: Counter[str] = field(default_factory=Counter)  # by final status ("unfinished": still open at the timeout)
    queued_messages: int = 0  # left on the broker's queues
    seconds: float = 0.0
    expected_memories: int = 0  # acknowledged adds and batch items
    lost: int = 0  # acknowledged, not stored
    duplicated: int = 0  # stored more than once
    documents: Counter[str] = field(default_factory=Counter)  # ingested documents by status

    @property
    def drained(self) -> bool:
        return set(self.jobs) <= {"succeeded"} and self.queued_messages == 0


@dataclass
class Report:
    queries_alone: OpStats
    queries: OpStats
    query_seconds: float
    mixed: dict[str, OpStats]
    mixed_seconds: float
    drain: Drain
    small_alone_seconds: float
    small_beside_large_seconds: float
    large_seconds: float
    merged: bool  # every vector the run wrote merged into the index by its end


def require_loopback(url: str) -> None:
    host = urlsplit(url).hostname or ""
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit(f"bench.load only loads a stack on this machine, not {host!r}")


async def timed(client: httpx.AsyncClient, stats: OpStats, method: str, path: str, **kw) -> httpx.Response | None:
    started = time.perf_counter()
    try:
        answer = await client.request(method, path, **kw)
    except httpx.HTTPError as exc:
        stats.transport[type(exc).__name__] += 1
        return None
    stats.statuses[answer.status_code] += 1
    if answer.status_code < 400:
        stats.latencies_ms.append((time.perf_counter() - started) * 1000)
    return answer


async def wait_jobs(
    client: httpx.AsyncClient, jobs: dict[str, str], timeout: float, *, interval: float = 0.5
) -> dict[str, str]:
    """Poll job ids (id → tenant) until each has ended or `timeout` passed; each one's final status
    ("unfinished" when still open at the timeout)."""
    deadline = time.monotonic() + timeout
    final: dict[str, str] = {}
    while time.monotonic() < deadline:
        for job_id, tenant in jobs.items():
            if job_id not in final:
                answer = await client.get(f"/jobs/{job_id}", params={"user_id": tenant})
                if answer.status_code == 200 and answer.json()["status"] in ENDED:
                    final[job_id] = answer.json()["status"]
        if len(final) == len(jobs):
            break
        await asyncio.sleep(interval)
    return {job_id: final.get(job_id, "unfinished") for job_id in jobs}


def question(rng: random.Random) -> str:
    return f"what did {rng.choice(SUBJECTS)} say about {rng.choice(OBJECTS)}?"


async def seed(client: httpx.AsyncClient, tenants: Sequence[str], per_tenant: int, timeout: float) -> None:
    texts = corpus(per_tenant)
    jobs = {}
    for tenant in tenants:
        answer = await client.post("/memory/batch", json={"items": [{"content": t} for t in texts], "user_id": tenant})
        answer.raise_for_status()
        jobs[answer.json()["job_id"]] = tenant
    statuses = Counter((await wait_jobs(client, jobs, timeout)).values())
    if statuses != Counter({"succeeded": len(jobs)}):
        raise RuntimeError(f"seeding the query tenants did not finish: {dict(statuses)}")


async def settled(database_url: str, redis_url: str, run: str, timeout: float) -> bool:
    """Wait until the background merge has indexed every vector this run wrote (it takes the CPU the queries
    need, and a merge still running after the run would be load on whatever runs next); whether it has.

    This stack has no beat, which asks for a merge every minute: every 20 s without one finishing the job, the
    wait asks for one itself (a merge already running makes it a no-op)."""
    deadline = time.monotonic() + timeout
    celery = make_celery(Settings(redis_url=redis_url), "mnemoflow.bench")
    asked = time.monotonic()
    try:
        with psycopg.connect(plain_dsn(database_url), autocommit=True) as conn:
            while True:
                fresh = conn.execute(
                    "SELECT count(*) FROM memory_vectors WHERE user_id LIKE %s AND NOT indexed", (f"{run}-%",)
                ).fetchone()
                if not fresh or not fresh[0]:
                    return True
                if time.monotonic() >= deadline:
                    print(f"  note: {fresh[0]} vectors still unmerged after {timeout:.0f} s", flush=True)
                    return False
                if time.monotonic() - asked > 20:
                    send(celery, MergeFresh())
                    asked = time.monotonic()
                await asyncio.sleep(0.5)
    finally:
        celery.close()


async def concurrent_queries(
    client: httpx.AsyncClient, profile: Profile, run: str, database_url: str, redis_url: str
) -> tuple[OpStats, OpStats, float]:
    """`query_clients` clients, each its own tenant, each sending `queries_per_client` queries back to back; and
    first, as a baseline, one client alone."""
    tenants = [f"{run}-q{i}" for i in range(profile.query_clients)]
    await seed(client, tenants, profile.seed_per_tenant, profile.drain_timeout_seconds)
    await settled(database_url, redis_url, run, profile.drain_timeout_seconds)
    alone, rng = OpStats(), random.Random(-1)
    for _ in range(profile.queries_per_client * 4):  # the baseline: one client, nothing else running
        await timed(client, alone, "POST", "/memory/query", json={"query": question(rng), "user_id": tenants[0]})
    stats = OpStats()

    async def one_client(i: int) -> None:
        rng = random.Random(i)
        for _ in range(profile.queries_per_client):
            await timed(client, stats, "POST", "/memory/query", json={"query": question(rng), "user_id": tenants[i]})

    started = time.perf_counter()
    await asyncio.gather(*(one_client(i) for i in range(profile.query_clients)))
    return alone, stats, time.perf_counter() - started


@dataclass
class Written:
    """What the mixed clients were told was accepted."""

    contents: dict[str, list[str]] = field(default_factory=dict)  # tenant → acknowledged memory contents
    batches: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # job id → (tenant, its items)
    jobs: dict[str, str] = field(default_factory=dict)  # job id → tenant (batches and ingests)
    documents: int = 0


def document(tenant: str, n: int, rng: random.Random) -> str:
    paragraphs = [" ".join(f"{rng.choice(SUBJECTS)} {rng.choice(OBJECTS)}" for _ in range(12)) for _ in range(4)]
    return f"Notes {n} of {tenant}.\n\n" + "\n\n".join(paragraphs)


async def mixed(
    client: httpx.AsyncClient, profile: Profile, run: str
) -> tuple[dict[str, OpStats], float, Written, list[str]]:
    """`clients` clients, each its own tenant, each doing what MIX says for `minutes`."""
    stats = {op: OpStats() for op in MIX}
    written = Written()
    tenants = [f"{run}-m{i}" for i in range(profile.clients)]
    deadline = time.monotonic() + profile.minutes * 60

    async def one_client(i: int) -> None:
        rng, tenant, n = random.Random(1000 + i), tenants[i], 0
        acknowledged = written.contents.setdefault(tenant, [])
        while time.monotonic() < deadline:
            n += 1
            op = rng.choices(list(MIX), weights=list(MIX.values()))[0]
            if op == "query":
                await timed(
                    client, stats[op], "POST", "/memory/query", json={"query": question(rng), "user_id": tenant}
                )
            elif op == "add":
                content = f"{tenant} add {n}: {question(rng)}"
                answer = await timed(
                    client, stats[op], "POST", "/memory/add", json={"content": content, "user_id": tenant}
                )
                if answer is not None and answer.status_code == 200:
                    acknowledged.append(content)
            elif op == "batch":
                items = [
                    f"{tenant} batch {n} item {k}: {question(rng)}" for k in range(rng.randint(*profile.batch_items))
                ]
                body = {"items": [{"content": c} for c in items], "user_id": tenant}
                answer = await timed(client, stats[op], "POST", "/memory/batch", json=body)
                if answer is not None and answer.status_code == 202:
                    written.batches[answer.json()["job_id"]] = (tenant, items)
                    written.jobs[answer.json()["job_id"]] = tenant
            else:
                body = {"content_type": "txt", "data": document(tenant, n, rng), "user_id": tenant}
                answer = await timed(client, stats[op], "POST", "/memory/ingest", json=body)
                if answer is not None and answer.status_code in (200, 202):
                    written.documents += 1
                    if answer.json().get("job_id"):
                        written.jobs[answer.json()["job_id"]] = tenant

    started = time.perf_counter()
    await asyncio.gather(*(one_client(i) for i in range(profile.clients)))
    return stats, time.perf_counter() - started, written, tenants


def queued_messages(redis_url: str) -> int:
    """Messages waiting on the broker's queues (Celery keeps each queue as a Redis list of its name)."""
    client = redis.Redis.from_url(redis_url)
    try:
        return sum(int(client.llen(queue)) for queue in ALL_QUEUES)
    finally:
        client.close()


async def drain(
    client: httpx.AsyncClient, written: Written, tenants: list[str], database_url: str, redis_url: str, timeout: float
) -> Drain:
    """Wait for the mixed run's jobs and the broker's queues; then count what was kept, per tenant."""
    started = time.perf_counter()
    final = await wait_jobs(client, written.jobs, timeout)
    result = Drain(jobs=Counter(final.values()))
    deadline = time.monotonic() + max(10.0, timeout - (time.perf_counter() - started))
    while (left := queued_messages(redis_url)) and time.monotonic() < deadline:
        await asyncio.sleep(0.5)  # reinforcements and merges the jobs left behind
    result.queued_messages = left
    result.seconds = time.perf_counter() - started
    expected = {tenant: list(contents) for tenant, contents in written.contents.items()}
    for job_id, (tenant, items) in written.batches.items():
        if final[job_id] == "succeeded":  # a failed job is counted above, not as lost memories
            expected.setdefault(tenant, []).extend(items)
    result.expected_memories = sum(len(contents) for contents in expected.values())
    with psycopg.connect(plain_dsn(database_url)) as conn:
        rows = conn.execute(
            "SELECT user_id, content, count(*) FROM memories WHERE user_id = ANY(%s) GROUP BY user_id, content",
            (tenants,),
        ).fetchall()
        stored = {(tenant, content): n for tenant, content, n in rows}
        result.duplicated = sum(n - 1 for n in stored.values() if n > 1)
        result.lost = sum(1 for tenant, contents in expected.items() for c in contents if (tenant, c) not in stored)
        documents = conn.execute(
            "SELECT status, count(*) FROM documents WHERE user_id = ANY(%s) GROUP BY status", (tenants,)
        ).fetchall()
        result.documents = Counter({status: n for status, n in documents})
    return result


async def two_tenants(client: httpx.AsyncClient, profile: Profile, run: str) -> tuple[float, float, float]:
    """Seconds for tenant B's small batch alone; for another one sent just after A's large batch; for A's batch."""

    async def batch(tenant: str, size: int) -> str:
        items = [{"content": f"{tenant} {text}"} for text in corpus(size, seed=len(tenant))]
        answer = await client.post("/memory/batch", json={"items": items, "user_id": tenant}, timeout=300)
        answer.raise_for_status()
        return answer.json()["job_id"]

    async def finished(job_id: str, tenant: str, started: float) -> float:
        status = (await wait_jobs(client, {job_id: tenant}, profile.drain_timeout_seconds, interval=0.1))[job_id]
        if status != "succeeded":
            raise RuntimeError(f"{tenant}'s batch did not succeed: {status}")
        return time.perf_counter() - started

    started = time.perf_counter()
    alone = await finished(await batch(f"{run}-b-alone", profile.small_batch), f"{run}-b-alone", started)
    started = time.perf_counter()
    large = await batch(f"{run}-a", profile.large_batch)
    small_started = time.perf_counter()
    small = await batch(f"{run}-b", profile.small_batch)
    small_s, large_s = await asyncio.gather(
        finished(small, f"{run}-b", small_started), finished(large, f"{run}-a", started)
    )
    return alone, small_s, large_s


async def run_profile(gateway: str, database_url: str, redis_url: str, profile: Profile) -> Report:
    """The three scenarios against a running stack, one after the other (each waits for the last to drain)."""
    require_loopback(gateway)
    run = f"load-{uuid.uuid4().hex[:8]}"
    connections = max(profile.query_clients, profile.clients) + 8
    # Idle connections are dropped before the server's keep-alive timeout (uvicorn: 5 s) could close one just
    # as a request goes out on it (a ReadError that says nothing about the stack).
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections, keepalive_expiry=2)
    async with httpx.AsyncClient(base_url=gateway, timeout=120, limits=limits) as client:
        started = time.perf_counter()
        alone, queries, query_s = await concurrent_queries(client, profile, run, database_url, redis_url)
        print(f"  seeded, settled and the baseline in {time.perf_counter() - started - query_s:.1f} s", flush=True)
        print(f"  concurrent queries done in {query_s:.1f} s", flush=True)
        ops, mixed_s, written, tenants = await mixed(client, profile, run)
        print(f"  mixed load done in {mixed_s:.1f} s; draining", flush=True)
        drained = await drain(client, written, tenants, database_url, redis_url, profile.drain_timeout_seconds)
        print(f"  drained in {drained.seconds:.1f} s; two tenants' batches", flush=True)
        small_alone, beside, large = await two_tenants(client, profile, run)
    merged = await settled(database_url, redis_url, run, profile.drain_timeout_seconds)
    deadline = time.monotonic() + 60
    while queued_messages(redis_url) and time.monotonic() < deadline:  # the merges it asked for, run or skipped
        await asyncio.sleep(0.5)
    return Report(alone, queries, query_s, ops, mixed_s, drained, small_alone, beside, large, merged)


def described(stats: OpStats) -> str:
    if not stats.latencies_ms:
        return f"{stats.requests:,} requests, none answered"
    p = percentiles(stats.latencies_ms)
    statuses = ", ".join(f"{status}: {n:,}" for status, n in sorted(stats.statuses.items()))
    transport = f", transport errors {dict(stats.transport)}" if stats.transport else ""
    return (
        f"{stats.requests:,} requests ({statuses}{transport}); 5xx {stats.server_errors}, 429 {stats.throttled}, "
        f"errors {stats.errors / max(1, stats.requests):.2%}; p50 {p['p50']:.1f} ms, p95 {p['p95']:.1f} ms, "
        f"p99 {p['p99']:.1f} ms"
    )


def print_report(report: Report, profile: Profile) -> None:
    q = report.queries
    print(f"\n1. {profile.query_clients} concurrent queries, one gateway process ({profile.queries_per_client} each):")
    print(f"   {described(q)}; {q.requests / report.query_seconds:,.0f} queries/s")
    print(f"   baseline, one client alone: {described(report.queries_alone)}")
    total = sum(s.requests for s in report.mixed.values())
    print(f"\n2. mixed: {profile.clients} clients for {report.mixed_seconds:.0f} s, {total:,} requests:")
    for op, stats in report.mixed.items():
        print(f"   {op:>6}: {described(stats)}")
    d = report.drain
    print(
        f"   drained: {'yes' if d.drained else 'NO'} in {d.seconds:.1f} s (jobs {dict(d.jobs)}, "
        f"{d.queued_messages} messages left); memories acknowledged {d.expected_memories:,}, lost {d.lost}, "
        f"stored twice {d.duplicated}; documents {dict(d.documents)}"
    )
    print(f"\n3. two tenants: B's {profile.small_batch}-item batch alone {report.small_alone_seconds:.1f} s;")
    print(
        f"   beside A's {profile.large_batch:,}-item batch {report.small_beside_large_seconds:.1f} s "
        f"(A's own: {report.large_seconds:.1f} s)"
    )
    print(f"\n   every vector of the run merged into the index at the end: {'yes' if report.merged else 'NO'}")


@contextlib.contextmanager
def own_stack(workers: int) -> Iterator[tuple[str, str, str]]:
    with servers() as srv:
        database_url = fresh_database(srv.admin_url, "bench_load")
        with stack(database_url, srv.redis_url, concurrency=workers) as gateway:
            yield gateway, database_url, srv.redis_url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a short run (20 clients x 1 minute, a 5k batch)")
    parser.add_argument("--clients", type=int, help="mixed clients [50; quick: 20]")
    parser.add_argument("--minutes", type=float, help="mixed load duration [10; quick: 1]")
    parser.add_argument("--large-batch", type=int, help="tenant A's batch [50,000; quick: 5,000]")
    parser.add_argument("--workers", type=int, default=2, help="worker processes [2]")
    args = parser.parse_args()
    profile = QUICK if args.quick else Profile()
    overrides = {"clients": args.clients, "minutes": args.minutes, "large_batch": args.large_batch}
    profile = replace(profile, **{k: v for k, v in overrides.items() if v is not None})
    print(f"[load] {profile}", flush=True)
    with own_stack(args.workers) as (gateway, database_url, redis_url):
        report = asyncio.run(run_profile(gateway, database_url, redis_url, profile))
    print_report(report, profile)


if __name__ == "__main__":
    main()
