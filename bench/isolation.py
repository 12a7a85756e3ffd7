"""Reads isolated from writes: query p95 on a settled store while a bulk batch and a document upload run.

One store: a query tenant (`reader`) seeded with --size memories through POST /memory/batch and merged into HNSW.
Each round, on a stack of its own (one per variant):

  (a) idle: --queries queries from --clients concurrent clients, nothing else running; p50/p95.
  (b) loaded: a --batch-memory POST /memory/batch and a --documents upload (bench.ingest_docs's corpus) start
      together, for a tenant of their own, and the same clients ask queries until both are done (every job
      succeeded, every document done); p50/p95, and the write rates (memories/s, documents/s).
  (c) writes idle: the same batch and documents again, for another fresh tenant, with no queries: the rates (b)
      is compared with.

Between phases the merge is let finish (no fresh vectors) and the stack go quiet. Queries ask the reader only,
never the writing tenants: a tenant's own fresh tier is searched without the index (docs/lifecycle.md), so the
same tenant would measure that scan, not the contention; the writes share the reader's tables, HNSW indexes,
processes and CPU. Each round adds 2 x (--batch + the documents' chunks) memories of other tenants to the same
tables, so the store grows (printed per round); the ratios compare phases of the same round.

The client sends what a user's does: `query`, `user_id`, `k` (reinforcement on, the default), and
`items`/`content` + `user_id` on the write routes. Synthetic embeddings unless --provider says otherwise.

    python -m bench.isolation                                                   # 100k, three rounds (~30 min)
    python -m bench.isolation --size 10000 --batch 10000 --documents 20 --queries 200 --rounds 1   # smoke
    python -m bench.isolation --variants default "nice:MNEMOFLOW_WORKER_NICE=10"   # a lever beside the default

A variant is `label` or `label:VAR=value,...`: environment of its stack (`concurrency=N`: the worker's processes).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import psycopg

from bench.common import (
    CpuMeter,
    Servers,
    StackUrl,
    corpus,
    fresh_database,
    percentiles,
    plain_dsn,
    servers,
    stack,
    wait_settled,
)
from bench.ingest import batch_until_queryable
from bench.ingest_docs import build, upload, wait_until_ingested
from bench.query import questions

READER = "reader"


@dataclass(frozen=True)
class Variant:
    label: str
    env: dict[str, str] = field(default_factory=dict)
    concurrency: int = 2

    @classmethod
    def parse(cls, spec: str, concurrency: int) -> Variant:
        label, _, rest = spec.partition(":")
        env = dict(pair.split("=", 1) for pair in rest.split(",") if pair)
        return cls(label, env, int(env.pop("concurrency", concurrency)))


@dataclass
class Round:
    number: int
    variant: str
    store: int = 0  # memories in the store when the round began (every tenant)
    idle: dict[str, float] = field(default_factory=dict)
    idle_n: int = 0
    loaded: dict[str, float] = field(default_factory=dict)
    loaded_n: int = 0
    after: dict[str, float] = field(default_factory=dict)  # idle again, after the loaded phase settled
    batch_loaded: float = 0.0
    docs_loaded: float = 0.0
    batch_idle: float = 0.0
    docs_idle: float = 0.0
    load: list[str] = field(default_factory=list)  # /proc/loadavg at each phase's start
    # CPU-seconds by process (gateway, worker, PostgreSQL, Valkey, this benchmark's clients) and the wall seconds of
    # the loaded phase and of the writes alone: where the CPU went while the writes shared it with the queries
    cpu_loaded: dict[str, float] = field(default_factory=dict)
    cpu_writes: dict[str, float] = field(default_factory=dict)

    @property
    def p95_ratio(self) -> float:
        return self.loaded["p95"] / self.idle["p95"]


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def ask(
    gateway: str, qs: list[str], k: int, clients: int, *, count: int | None = None, until: threading.Event | None = None
) -> list[float]:
    """Milliseconds per query from `clients` concurrent clients: `count` queries in all, or as many as are started
    before `until` is set."""
    samples: list[float] = []
    lock = threading.Lock()
    throttled: list[int] = []
    asked = 0

    def client(offset: int) -> None:
        nonlocal asked
        with httpx.Client(base_url=gateway, timeout=60) as http:
            while True:
                with lock:
                    if (count is not None and asked >= count) or (until is not None and until.is_set()):
                        return
                    i = asked
                    asked += 1
                q = qs[(i + offset) % len(qs)]
                while True:
                    started = time.perf_counter()
                    response = http.post("/memory/query", json={"query": q, "user_id": READER, "k": k})
                    if response.status_code != 429:  # the tenant's rate limit: wait as told, ask again, uncounted
                        break
                    throttled.append(1)
                    time.sleep(float(response.headers.get("Retry-After", 1)))
                response.raise_for_status()
                elapsed = (time.perf_counter() - started) * 1000
                with lock:
                    samples.append(elapsed)

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    if throttled:
        print(f"  note: {len(throttled)} refused 429 (rate limit), asked again", flush=True)
    return samples


def upload_retrying(client: httpx.Client, path: Path, user: str) -> str:
    """bench.ingest_docs's upload, waiting as told when the tenant's ingest rate limit refuses it (a 429)."""
    while True:
        try:
            return upload(client, path, user)
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code != 429:
                raise
            time.sleep(float(exc.response.headers.get("Retry-After", 1)))


class Writes:
    """One batch and one document upload at once, each for `user`; their rates once both are done."""

    def __init__(self, gateway: str, url: str, texts: list[str], files: list[Path], user: str, docs_before: int):
        self.done = threading.Event()
        self.batch_s = self.docs_s = 0.0
        self.error: BaseException | None = None
        self._args = (gateway, url, texts, files, user, docs_before)

    def run(self) -> None:
        gateway, url, texts, files, user, docs_before = self._args

        def batch() -> None:
            self.batch_s, _ = batch_until_queryable(gateway, url, texts, 5_000, settle=False, user=user)

        def documents() -> None:
            started = time.perf_counter()
            with httpx.Client(base_url=gateway, timeout=120) as client, ThreadPoolExecutor(4) as pool:
                list(pool.map(lambda path: upload_retrying(client, path, user), files))
            wait_until_ingested(plain_dsn(url), docs_before + len(files), lambda _: None)
            self.docs_s = time.perf_counter() - started

        try:
            with ThreadPoolExecutor(2) as pool:
                for future in [pool.submit(batch), pool.submit(documents)]:
                    future.result()
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()

    def rates(self) -> tuple[float, float]:
        if self.error is not None:
            raise self.error
        texts, files = self._args[2], self._args[3]
        return len(texts) / self.batch_s, len(files) / self.docs_s


def settle(url: str) -> None:
    """Until the merge has indexed every fresh vector and this benchmark's servers and stack are quiet."""
    with psycopg.connect(plain_dsn(url), autocommit=True) as conn:
        while conn.execute("SELECT count(*) FROM memory_vectors WHERE NOT indexed").fetchone()[0]:  # type: ignore[index]
            time.sleep(1.0)
    wait_settled(psutil.Process().children(), timeout=120)


def memories(url: str) -> int:
    with psycopg.connect(plain_dsn(url)) as conn:
        return int(conn.execute("SELECT count(*) FROM memories").fetchone()[0])  # type: ignore[index]


def documents_done(url: str) -> int:
    with psycopg.connect(plain_dsn(url)) as conn:
        return int(conn.execute("SELECT count(*) FROM documents").fetchone()[0])  # type: ignore[index]


@contextlib.contextmanager
def variant_stack(url: str, redis_url: str, variant: Variant) -> Iterator[StackUrl]:
    saved = {key: os.environ.get(key) for key in variant.env}
    os.environ.update(variant.env)
    try:
        with stack(url, redis_url, concurrency=variant.concurrency) as gateway:
            yield gateway
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def cpu_line(cpu: dict[str, float]) -> str:
    """`role s` for each role, then the total against the phase's wall time (cores busy on average)."""
    wall = cpu.get("wall", 0.0)
    used = {role: seconds for role, seconds in cpu.items() if role != "wall"}
    total = sum(used.values())
    parts = ", ".join(f"{role} {seconds:.1f}" for role, seconds in used.items())
    return f"{parts}; {total:.1f} in {wall:.1f} s of wall ({total / wall if wall else 0:.2f} cores)"


def one_round(
    number: int,
    variant: Variant,
    url: str,
    redis_url: str,
    qs: list[str],
    batch: list[str],
    files: list[Path],
    args,
    srv: Servers,
) -> Round:
    result = Round(number, variant.label, store=memories(url))
    tag = f"r{number}-{variant.label}"
    say: Callable[[str], None] = lambda line: print(f"  [{tag}] {line}", flush=True)  # noqa: E731
    with variant_stack(url, redis_url, variant) as gateway:
        ask(gateway, qs[:20], args.k, 1, count=20)  # warm-up: the gateway's first queries, the backends' caches
        settle(url)
        result.load.append(loadavg())
        idle = ask(gateway, qs, args.k, args.clients, count=args.queries)
        result.idle, result.idle_n = percentiles(idle), len(idle)
        say(f"idle: {len(idle):,} queries, p50 {result.idle['p50']:.1f} p95 {result.idle['p95']:.1f} ms")

        result.load.append(loadavg())
        writes = Writes(gateway, url, batch, files, f"writer-{tag}-loaded", documents_done(url))
        writer = threading.Thread(target=writes.run, name="writes")
        meter = CpuMeter.of_stack(gateway, srv)
        writer.start()
        loaded = ask(gateway, qs, args.k, args.clients, until=writes.done)
        writer.join()
        result.cpu_loaded = meter.since_start() | {"wall": time.perf_counter() - meter.started}
        result.batch_loaded, result.docs_loaded = writes.rates()
        result.loaded, result.loaded_n = percentiles(loaded), len(loaded)
        if len(loaded) < args.queries:
            say(f"note: only {len(loaded)} queries ran while the writes did (fewer than --queries)")
        say(
            f"loaded: {len(loaded):,} queries, p50 {result.loaded['p50']:.1f} p95 {result.loaded['p95']:.1f} ms; "
            f"batch {result.batch_loaded:,.0f} memories/s, documents {result.docs_loaded:.2f}/s"
        )
        settle(url)
        after = ask(gateway, qs, args.k, args.clients, count=args.queries)
        result.after = percentiles(after)
        say(f"idle again: p50 {result.after['p50']:.1f} p95 {result.after['p95']:.1f} ms")

        result.load.append(loadavg())
        writes = Writes(gateway, url, batch, files, f"writer-{tag}-idle", documents_done(url))
        meter = CpuMeter.of_stack(gateway, srv)
        writes.run()
        result.cpu_writes = meter.since_start() | {"wall": time.perf_counter() - meter.started}
        result.batch_idle, result.docs_idle = writes.rates()
        say(f"writes idle: batch {result.batch_idle:,.0f} memories/s, documents {result.docs_idle:.2f}/s")
        say(f"CPU-seconds, loaded: {cpu_line(result.cpu_loaded)}")
        say(f"CPU-seconds, writes idle: {cpu_line(result.cpu_writes)}")
        settle(url)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=100_000, help="the query tenant's memories [100000]")
    parser.add_argument("--batch", type=int, default=100_000, help="memories of the batch written meanwhile [100000]")
    parser.add_argument("--documents", type=int, default=200, help="documents uploaded meanwhile [200]")
    parser.add_argument("--queries", type=int, default=1000, help="queries idle, and at least this many loaded")
    parser.add_argument("--clients", type=int, default=3, help="concurrent query clients [3]")
    parser.add_argument("-k", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes [2, the default]")
    parser.add_argument(
        "--variants", nargs="+", default=["default"], help="stacks to compare, each round (see above) [default]"
    )
    parser.add_argument(
        "--provider",
        default=os.environ.get("MNEMOFLOW_EMBEDDING_PROVIDER", "synthetic"),
        choices=["synthetic", "local", "static"],
        help="embedding provider of the stack [synthetic]",
    )
    args = parser.parse_args()
    os.environ["MNEMOFLOW_EMBEDDING_PROVIDER"] = args.provider
    variants = [Variant.parse(spec, args.concurrency) for spec in args.variants]

    rounds: list[Round] = []
    with tempfile.TemporaryDirectory(prefix="bench-isolation-") as tmp, servers() as srv:
        files = [path for _, path in build(Path(tmp), args.documents, 0)]
        texts = corpus(args.size)
        batch = corpus(args.batch, seed=13)
        qs = questions(texts, max(args.queries, 1000))
        url = fresh_database(srv.admin_url, "bench_isolation")
        print(f"load average at the start: {loadavg()}", flush=True)
        with stack(url, srv.redis_url, concurrency=args.concurrency) as gateway:
            queryable_s, settled_s = batch_until_queryable(gateway, url, texts, 5_000, user=READER)
        with psycopg.connect(plain_dsn(url), autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
        print(
            f"seeded {args.size:,} memories for {READER!r} through POST /memory/batch: "
            f"queryable in {queryable_s:.0f} s, merged into HNSW in {settled_s:.0f} s",
            flush=True,
        )
        for number in range(1, args.rounds + 1):
            for variant in variants:
                rounds.append(one_round(number, variant, url, srv.redis_url, qs, batch, files, args, srv))
        print(f"load average at the end: {loadavg()}")

    print(
        f"\nquery latency of {READER!r} ({args.size:,} memories, k={args.k}, {args.clients} concurrent clients, "
        f"reinforcement on) idle and while a {args.batch:,}-memory batch and {args.documents} documents were written "
        f"for another tenant; {args.provider} embeddings, worker of {args.concurrency} processes unless the variant "
        "says; write rates loaded and with no queries (idle). p50/p95 in ms, rates in memories/s and documents/s."
    )
    header = (
        "round",
        "variant",
        "store",
        "idle p50",
        "idle p95",
        "loaded n",
        "ld p50",
        "ld p95",
        "p95 x",
        "after p95",
        "batch idle",
        "batch ld",
        "x",
        "docs idle",
        "docs ld",
        "x",
        "loadavg idle / loaded / writes",
    )
    line = "{:>5} {:>10} {:>9} {:>8} {:>8} {:>8} {:>7} {:>7} {:>6} {:>9} {:>10} {:>8} {:>5} {:>9} {:>7} {:>5}  {}"
    print(line.format(*header))
    for r in rounds:
        print(
            line.format(
                r.number,
                r.variant,
                f"{r.store:,}",
                f"{r.idle['p50']:.1f}",
                f"{r.idle['p95']:.1f}",
                f"{r.loaded_n:,}",
                f"{r.loaded['p50']:.1f}",
                f"{r.loaded['p95']:.1f}",
                f"{r.p95_ratio:.2f}",
                f"{r.after['p95']:.1f}",
                f"{r.batch_idle:,.0f}",
                f"{r.batch_loaded:,.0f}",
                f"{r.batch_loaded / r.batch_idle:.2f}",
                f"{r.docs_idle:.2f}",
                f"{r.docs_loaded:.2f}",
                f"{r.docs_loaded / r.docs_idle:.2f}",
                " / ".join(r.load),
            )
        )
    for variant in variants:
        mine = [r for r in rounds if r.variant == variant.label]
        print(
            f"{variant.label}: median over {len(mine)} rounds: loaded/idle p95 "
            f"{statistics.median(r.p95_ratio for r in mine):.2f}x (target <= 2), batch rate loaded/idle "
            f"{statistics.median(r.batch_loaded / r.batch_idle for r in mine):.2f}, documents "
            f"{statistics.median(r.docs_loaded / r.docs_idle for r in mine):.2f} (target >= 0.5 each)"
        )


if __name__ == "__main__":
    main()
