"""Query latency of POST /memory/query at several store sizes: p50/p95/p99 over HTTP.

Each question is asked twice, in alternating order: as a plain client asks (query, k, user_id: the figure), and
with `explain: true`, whose answers carry the server's time per stage (printed, with that request's own latency).

Baseline, same run and database: the bare HNSW top-(k×4) SQL query on the one graph of the model's
dimension (every sector's vectors, each walked once), which is the floor any full pipeline stands on. Prints both
and the ratio.

    python -m bench.query --sizes 10000 100000
    python -m bench.query --sizes 100000 --period              # and each question naming a period
    python -m bench.query --sizes 100000 --sector semantic     # and each filtered to a sector
    python -m bench.query --sizes 100000 --beside 2000         # and a small tenant beside the large one
    python -m bench.query --sizes 100000 --crowd 200           # the large one among 200 tenants of 50
    python -m bench.query --sizes 1000000 --queries 300      # bulk-loaded (~25 min here)
    python -m bench.query --sizes 100000 --adds 300            # and single adds, with the write steps and without
    python -m bench.query --sizes 100000 --gate-ab 500         # and queries with the evidence gate and without

`--adds N`: after the queries, N single adds (`POST /memory/add`, LoCoMo's turns as a plain client sends them:
content and a `session_id`) to the store, alternating between the stack at its defaults and a second gateway on the
same store with the issue-48 write steps off (MNEMOFLOW_UPDATE_DETECTION, MNEMOFLOW_DEDUP_FACTS): the steps' cost
at that size, measured in the same run. The model is the stack's (synthetic unless MNEMOFLOW_EMBEDDING_PROVIDER
says otherwise), so a change cue's second model call costs what that model costs.

`--gate-ab N`: N queries each way, alternating between the stack at its defaults and a second gateway on the same
store with the evidence gate off (MNEMOFLOW_MIN_EVIDENCE=0), as a plain client asks (no `explain`, reinforcement
on): what the gate adds to a query at that size, in the same run.

Stores up to --bulk-from memories go through the engine's write path and the background merge, as
the workers would. Larger ones are bulk-loaded: memories and vectors written by the same engine with
the HNSW indexes dropped, one index build, then the merge's own `MemoryEngine.link` (each memory's
best-match link; the BM25 statistics were counted as they were stored) in chunks on two connections at once. The
merge inserts into a live HNSW index at ~300-400 vectors/s here: 1M would take 45 min or more before
the first query. One difference: linked after the build, a memory's best match may be a later memory,
where the merge only sees earlier ones; each still gets at most one forward link, but the graph is many mutual
pairs where the merge's is trees, and two hops from a query's hits reach half as many memories: at 100k a
bulk-loaded store answered 12–16 % faster than the same texts stored through the write path (docs/benchmarks.md, "a
store built as users build it"). A user's figure is the write path's.
"""

from __future__ import annotations

import argparse
import random
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector

from bench.common import (
    CpuMeter,
    Servers,
    StackUrl,
    bench_settings,
    corpus,
    fresh_database,
    percentiles,
    plain_dsn,
    servers,
    stack,
)
from shared.api.memories import MemoryCreate
from shared.db import Database, create_db_engine
from shared.embedding.base import EmbeddingProvider
from shared.embedding.factory import create_embedder
from shared.memory.engine import MemoryEngine
from shared.tenancy import DbRole

USER = "bench"
AFTERMATH_S = 1.0  # the gateway writes a query's after-effects within 0.1 s; the worker applies them soon after


def tenants(n: int) -> list[str]:
    """The tenants a run stores the corpus for and asks in turn (`--tenants`)."""
    return [USER, *(f"{USER}-{i}" for i in range(1, n))]


def load(database_url: str, texts: list[str], batch: int = 2_000, users: list[str] | None = None) -> float:
    """Store the corpus through the engine's own write path (insert + waypoints), in batches, for each tenant."""
    settings = bench_settings(database_url)
    engine = MemoryEngine(settings, create_embedder(settings))
    db = Database(create_db_engine(settings, "mnemoflow.bench"))
    store_wide = Database(create_db_engine(settings, "mnemoflow.bench.merge", role=DbRole.MAINTENANCE))
    started = time.perf_counter()
    for user in users or [USER]:
        for start in range(0, len(texts), batch):
            items = [MemoryCreate(content=t) for t in texts[start : start + batch]]
            with db.session(user) as session:  # the tenant's writes
                engine.store(session, engine.prepare(items, user)[0], settle=False)
    while True:  # the background merge, run to completion here so the index is settled
        with store_wide.session() as session:
            merged, _ = engine.merge_fresh(session, limit=settings.merge_batch_size, analyze=True)
        if not merged:
            break
    db.dispose()
    store_wide.dispose()
    with psycopg.connect(plain_dsn(database_url), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return time.perf_counter() - started


def load_bulk(database_url: str, texts: list[str], batch: int = 10_000, link_chunk: int = 2_000) -> float:
    """The same rows as `load`, for a million memories: index once, then count and link in bulk."""
    settings = bench_settings(database_url)
    engine = MemoryEngine(settings, create_embedder(settings))
    db = Database(create_db_engine(settings, "mnemoflow.bench")).bound(USER)  # the tenant's writes
    store_wide = Database(create_db_engine(settings, "mnemoflow.bench.merge", role=DbRole.MAINTENANCE))
    dsn = plain_dsn(database_url)
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        indexes = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memory_vectors' "
            "AND indexdef LIKE '%%USING hnsw%%'"
        ).fetchall()
        for name, _ in indexes:
            conn.execute(f"DROP INDEX {name}")
    for start in range(0, len(texts), batch):
        items = [MemoryCreate(content=t) for t in texts[start : start + batch]]
        with db.session() as session:
            engine.store(session, engine.prepare(items, USER)[0], settle=False)
        if start and start % 100_000 == 0:
            print(f"  stored {start:,} ({time.perf_counter() - started:.0f} s)", flush=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE memory_vectors SET indexed = true WHERE NOT indexed")
        conn.execute("VACUUM ANALYZE memory_vectors")
        conn.execute("SET maintenance_work_mem = '4GB'")
        conn.execute("SET max_parallel_maintenance_workers = 2")
        for _, ddl in indexes:
            conn.execute(ddl)
        print(f"  indexed {len(indexes)} HNSW indexes ({time.perf_counter() - started:.0f} s)", flush=True)
        by_sector: dict[str, list[uuid.UUID]] = {}
        for memory_id, sector in conn.execute(
            "SELECT id, primary_sector FROM memories WHERE user_id = %s ORDER BY id", (USER,)
        ):
            by_sector.setdefault(sector, []).append(memory_id)
    chunks = [(s, ids[i : i + link_chunk]) for s, ids in by_sector.items() for i in range(0, len(ids), link_chunk)]

    def link(chunk: tuple[str, list[uuid.UUID]]) -> int:
        sector, ids = chunk
        with store_wide.session() as session:  # what the merge does (the terms were counted when stored)
            return engine.link(session, {sector: ids})

    with ThreadPoolExecutor(max_workers=2) as pool:
        links = sum(pool.map(link, chunks))
    db.dispose()
    store_wide.dispose()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    print(f"  linked ({links:,} waypoints, {time.perf_counter() - started:.0f} s)", flush=True)
    return time.perf_counter() - started


def questions(texts: list[str], n: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    picked = rng.sample(texts, min(n, len(texts)))
    # Questions share some words with a stored memory, not all of them.
    return [" ".join(w for w in t.split() if rng.random() < 0.6) or t for t in picked]


def baseline(database_url: str, qs: list[str], k: int) -> tuple[list[float], list[float]]:
    """The bare HNSW query's milliseconds per question, and the model's own to embed each question."""
    settings = bench_settings(database_url)
    embedder = create_embedder(settings)
    samples, model = [], []
    with psycopg.connect(plain_dsn(database_url), autocommit=True) as conn:
        register_vector(conn)
        conn.execute(f"SET hnsw.ef_search = {settings.hnsw_ef_search}")
        for q in qs:
            embedding_ms, hnsw_ms = bare_query(conn, embedder, q, k)
            model.append(embedding_ms)
            samples.append(hnsw_ms)
    return samples, model


def bare_query(conn: psycopg.Connection, embedder: EmbeddingProvider, q: str, k: int) -> tuple[float, float]:
    """The model's milliseconds to embed `q`, and the bare HNSW top-4k query's on the one graph."""
    started = time.perf_counter()
    vector = Vector(np.asarray(embedder.embed([q])[0], dtype=np.float32))
    embedding_ms = (time.perf_counter() - started) * 1000
    dim = embedder.dim
    started = time.perf_counter()
    conn.execute(
        f"SELECT memory_id FROM memory_vectors WHERE walked AND dim = {dim} AND indexed "
        f"ORDER BY embedding::vector({dim}) <=> %s::vector({dim}) LIMIT %s",
        (vector, k * 4),
    ).fetchall()
    return embedding_ms, (time.perf_counter() - started) * 1000


def over_http(
    gateway: StackUrl,
    srv: Servers,
    qs: list[str],
    k: int,
    users: list[str] | None = None,
    filters: dict[str, Any] | None = None,
) -> tuple[list[float], list[float], dict[str, list[float]], dict[str, float]]:
    """Wall-clock latency per query as a plain client asks (query, k, user_id: what OpenMemory's clients send),
    then the same question with `explain: true`, the two in alternating order; from the explained requests, the
    server's per-stage timings: "server" is the engine's whole time (`total`), "outside" the rest of the wall clock
    (HTTP, validation, serialisation, the Redis bookkeeping around the query). With several `users`, queries ask
    them in turn: each query's connection last served another tenant. Last, the CPU milliseconds a query cost each
    process (the stack's gateway and worker, and the servers `srv`), its after-effects (reinforcement) included.
    Among the stages, `candidates` is a count: the memories each query scored (its hits and what their waypoints
    reached). `filters`: sent with every query (`filters.sector`: a walk of that sector's graph)."""
    extra = {"filters": filters} if filters else {}
    users = users or [USER]
    plain: list[float] = []
    explained: list[float] = []
    stages: dict[str, list[float]] = {}
    with httpx.Client(base_url=gateway, timeout=30) as client:
        for i, q in enumerate(qs[:20]):  # warm-up
            client.post("/memory/query", json={"query": q, "k": k, "user_id": users[i % len(users)]} | extra)
        time.sleep(AFTERMATH_S)  # the warm-up's reinforcement lands before the meter starts
        meter = CpuMeter.of_stack(gateway, srv)
        for i, q in enumerate(qs):
            body = {"query": q, "k": k, "user_id": users[i % len(users)]} | extra
            # the second asking of a question finds its embedding cached: each kind goes second half the time
            for explain in (False, True) if i % 2 == 0 else (True, False):
                started = time.perf_counter()
                response = client.post("/memory/query", json=(body | {"explain": True}) if explain else body)
                wall = (time.perf_counter() - started) * 1000
                response.raise_for_status()
                if not explain:
                    plain.append(wall)
                    continue
                explained.append(wall)
                answer = response.json()
                timings = answer["timings_ms"]
                server = timings.pop("total")  # less than the stages' sum: full text runs beside embed + dense
                for stage, ms in timings.items():
                    stages.setdefault(stage, []).append(ms)
                # the memories scored: the hits and what their waypoints reached (the store's graph sets this)
                stages.setdefault("candidates", []).append(answer["candidates"])
                stages.setdefault("server", []).append(server)
                stages.setdefault("outside", []).append(wall - server)
    time.sleep(AFTERMATH_S)  # and the last queries' reinforcement lands before it stops
    cpu = {role: seconds * 1000 / (2 * len(qs)) for role, seconds in meter.since_start().items()}
    return plain, explained, stages, cpu


WRITE_STEPS_OFF = {"MNEMOFLOW_UPDATE_DETECTION": "false", "MNEMOFLOW_DEDUP_FACTS": "false"}
GATE_OFF = {"MNEMOFLOW_MIN_EVIDENCE": "0"}


def alternating(
    url: str, srv: Servers, off: dict[str, str], requests: list[tuple[str, dict]], warm_up: int = 0
) -> tuple[list[float], list[float]]:
    """Wall-clock ms of `requests` (path and body), sent in turn to the stack at its defaults and to a second gateway
    on the same store with the settings `off` (one client): the first `warm_up` of them are not timed."""
    with stack(url, srv.redis_url) as on, stack(url, srv.redis_url, env=off) as changed:
        samples: dict[str, list[float]] = {on: [], changed: []}
        clients = {g: httpx.Client(base_url=g, timeout=30) for g in (on, changed)}
        try:
            for i, (path, body) in enumerate(requests):
                gateway = (on, changed)[i % 2]
                started = time.perf_counter()
                clients[gateway].post(path, json=body).raise_for_status()
                if i >= warm_up:
                    samples[gateway].append((time.perf_counter() - started) * 1000)
        finally:
            for client in clients.values():
                client.close()
    return samples[on], samples[changed]


def adds_ab(url: str, srv: Servers, n: int) -> tuple[list[float], list[float]]:
    """Wall-clock ms of `n` adds at the defaults and `n` with the write steps off, alternating (one client)."""
    from bench.embedding_quality import DATA
    from bench.quality_data import load_locomo

    turns = [doc.content for docs in load_locomo(DATA, "", 0).docs.values() for doc in docs]
    requests = [
        ("/memory/add", {"content": turns[i % len(turns)], "user_id": USER, "metadata": {"session_id": f"s{i // 40}"}})
        for i in range(2 * n)
    ]
    return alternating(url, srv, WRITE_STEPS_OFF, requests)


def queries_ab(url: str, srv: Servers, qs: list[str], k: int, n: int) -> tuple[list[float], list[float]]:
    """Wall-clock ms of `n` queries at the defaults and `n` with the evidence gate off, alternating (one client);
    the first 20 each way warm the caches and the connections."""
    requests = [
        ("/memory/query", {"query": qs[(i // 2) % len(qs)], "k": k, "user_id": USER}) for i in range(2 * n + 40)
    ]
    return alternating(url, srv, GATE_OFF, requests, warm_up=40)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("-k", type=int, default=8)
    parser.add_argument("--bulk-from", type=int, default=300_000, help="bulk-load stores of this size and up")
    parser.add_argument(
        "--tenants",
        type=int,
        default=1,
        help="store the corpus for this many tenants and ask them in turn (each query's connection last served "
        "another tenant: the worst case for setting the tenant on the read path; not with --bulk-from sizes)",
    )
    parser.add_argument(
        "--beside",
        type=int,
        default=0,
        help="also store a small tenant of this many memories (other texts) and ask it the same way: a tenant with a "
        "small share of each sector's shared HNSW index, beside the large one (its questions from its own texts)",
    )
    parser.add_argument(
        "--crowd",
        type=int,
        default=0,
        help="also store this many tenants of 50 memories each: a store of many small tenants, whose statistics "
        "make a plan made for the average tenant read every row of a large one",
    )
    parser.add_argument(
        "--period",
        action="store_true",
        help='ask every question again with " this year" added: the worst case of time anchoring\'s search of '
        "the period (every memory of the store happened in it, so MNEMOFLOW_PERIOD_SCAN_LIMIT are compared)",
    )
    parser.add_argument(
        "--sector",
        action="append",
        default=[],
        help="ask every question again with `filters.sector` this sector (repeatable): a walk of the sector's own "
        "graph, to compare with the unfiltered",
    )
    parser.add_argument("--adds", type=int, default=0, help="and this many single adds each way (see above)")
    parser.add_argument("--gate-ab", type=int, default=0, help="and this many queries each way (see above)")
    args = parser.parse_args()

    rows = []
    with servers() as srv:
        for size in args.sizes:
            texts = corpus(size)
            url = fresh_database(srv.admin_url, "bench_query")
            users = tenants(args.tenants)
            bulk = size >= args.bulk_from
            load_s = load_bulk(url, texts) if bulk else load(url, texts, users=users)
            load_rate = size * (1 if bulk else len(users)) / load_s
            qs = questions(texts, args.queries)
            hnsw, model = baseline(url, qs, args.k)
            base, own = percentiles(hnsw), percentiles(model)
            runs: dict[str, tuple[list[str], dict[str, Any] | None]] = {"": (qs, None)}
            if args.period:
                runs[" this year"] = ([f"{q} this year" for q in qs], None)
            for sector in args.sector:
                runs[f" in {sector}"] = (qs, {"sector": sector})
            small = f"{USER}-small"
            if args.crowd:  # the same 50 texts each: what matters is how many tenants there are
                load(url, corpus(50, seed=98), users=[f"{USER}-crowd-{i}" for i in range(args.crowd)])
            if args.beside:
                small_texts = corpus(args.beside, seed=99)
                load(url, small_texts, users=[small])
                small_qs = questions(small_texts, args.queries)
            with stack(url, srv.redis_url) as gateway:
                measured = {
                    label: over_http(gateway, srv, asked, args.k, users, filters)
                    for label, (asked, filters) in runs.items()
                }
                if args.beside:
                    label = f" + a {args.beside:,}-memory tenant, asked"
                    measured[label] = over_http(gateway, srv, small_qs, args.k, [small])
            for label, (samples, with_explain, stages, cpu) in measured.items():
                ours, traced = percentiles(samples), percentiles(with_explain)
                rows.append((f"{size:,}{label}", base, ours))
                scored = percentiles(stages.pop("candidates"))
                print(
                    f"  per stage{label} (server side, ms): "
                    + ", ".join(
                        f"{stage} p50 {percentiles(v)['p50']:.1f} p95 {percentiles(v)['p95']:.1f}"
                        for stage, v in stages.items()
                    )
                    + f"; candidates scored p50 {scored['p50']:.0f} p95 {scored['p95']:.0f}",
                    flush=True,
                )
                print(
                    f"  CPU per query{label} (ms, reinforcement included): "
                    + ", ".join(f"{role} {ms:.2f}" for role, ms in cpu.items()),
                    flush=True,
                )
                print(
                    f"[query{label}] n={size:,}: ours p50 {ours['p50']:.1f} p95 {ours['p95']:.1f} "
                    f"p99 {ours['p99']:.1f} ms | bare HNSW p50 {base['p50']:.1f} p95 {base['p95']:.1f} ms | "
                    f"the model alone p50 {own['p50']:.1f} p95 {own['p95']:.1f} ms (loaded at {load_rate:,.0f}/s) | "
                    f"with explain p50 {traced['p50']:.1f} p95 {traced['p95']:.1f} ms",
                    flush=True,
                )
            if args.gate_ab:
                gated, ungated = (percentiles(s) for s in queries_ab(url, srv, qs, args.k, args.gate_ab))
                print(
                    f"[query, gate] n={size:,}: defaults p50 {gated['p50']:.1f} p95 {gated['p95']:.1f} ms | "
                    f"gate off p50 {ungated['p50']:.1f} p95 {ungated['p95']:.1f} ms | p50 "
                    f"{gated['p50'] - ungated['p50']:+.1f} ms, p95 {gated['p95'] - ungated['p95']:+.1f} ms",
                    flush=True,
                )
            if args.adds:
                with_steps, without = (percentiles(s) for s in adds_ab(url, srv, args.adds))
                print(
                    f"[add] n={size:,}: defaults p50 {with_steps['p50']:.1f} p95 {with_steps['p95']:.1f} ms | "
                    f"write steps off p50 {without['p50']:.1f} p95 {without['p95']:.1f} ms | p50 "
                    f"{with_steps['p50'] - without['p50']:+.1f} ms, p95 {with_steps['p95'] - without['p95']:+.1f} ms",
                    flush=True,
                )

    print(f"\nquery latency, full pipeline over HTTP (k={args.k}, {args.queries} queries, one client)")
    width = max([19, *(len(label) for label, _, _ in rows)])
    print(f"{'n':>{width}} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'HNSW p50':>9} {'HNSW p95':>9} {'p95 ratio':>10}")
    for label, base, ours in rows:
        print(
            f"{label:>{width}} {ours['p50']:>8.1f} {ours['p95']:>8.1f} {ours['p99']:>8.1f} {base['p50']:>9.1f} "
            f"{base['p95']:>9.1f} {ours['p95'] / base['p95']:>10.1f}"
        )


if __name__ == "__main__":
    main()
