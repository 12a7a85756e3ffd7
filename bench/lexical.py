"""The BM25 stage alone at scale: `lexical_candidates` on a store of N synthetic memories.

    python -m bench.lexical --size 1000000      # ~5 min to load here

The memories are stored through the engine (fresh vectors, no HNSW index, no links: this stage needs
neither) and counted into the BM25 statistics; then the same 300 questions as `bench.query` are asked
directly (no HTTP), first with no selection budget and no rescore window (every rare term selects,
every match is scored with term frequency: the baseline), then with the configured
`lexical_select_budget`, then with it and the `lexical_rescore_window`, two rounds each. Prints
p50/p95/p99, the mean number of candidates, and the p95 ratio to the baseline.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import psycopg

from bench.common import bench_settings, corpus, fresh_database, percentiles, plain_dsn, servers
from bench.query import USER, questions
from shared.api.memories import MemoryCreate
from shared.db import Database, create_db_engine
from shared.embedding.factory import create_embedder
from shared.memory.engine import MemoryEngine
from shared.retrieval.lexical import LexicalParams
from shared.storage import bm25
from shared.storage.rows import MemoryFilter


def load(engine: MemoryEngine, db: Database, dsn: str, texts: list[str], batch: int = 10_000) -> float:
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:  # this stage reads no vector index
        for (name,) in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'memory_vectors' AND indexdef LIKE '%%USING hnsw%%'"
        ).fetchall():
            conn.execute(f"DROP INDEX {name}")
    for start in range(0, len(texts), batch):
        items = [MemoryCreate(content=t) for t in texts[start : start + batch]]
        with db.session() as session:
            engine.store(session, engine.prepare(items, USER)[0], settle=False)  # counted as stored
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE memories")
    return time.perf_counter() - started


def ask(db: Database, qs: list[str], params: LexicalParams, k: int) -> tuple[list[float], float]:
    samples, found = [], 0
    with db.session() as session:
        for q in qs:
            started = time.perf_counter()
            hits = bm25.lexical_candidates(session, USER, q, limit=k * 4, where=MemoryFilter(), params=params)
            samples.append((time.perf_counter() - started) * 1000)
            found += len(hits)
    return samples, found / len(qs)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.lexical", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("-k", type=int, default=8)
    args = parser.parse_args()
    with servers() as srv:
        url = fresh_database(srv.admin_url, "bench_lexical")
        settings = bench_settings(url)
        engine = MemoryEngine(settings, create_embedder(settings))
        db = Database(create_db_engine(settings, "mnemoflow.bench")).bound(USER)
        texts = corpus(args.size)
        seconds = load(engine, db, plain_dsn(url), texts)
        print(f"stored and counted {args.size:,} memories in {seconds:.0f} s", flush=True)
        qs = questions(texts, args.queries)
        ours = settings.lexical
        variants = {
            "baseline: no selection budget": dataclasses.replace(ours, select_budget=0, rescore_window=0),
            f"select budget {ours.select_budget:,}": dataclasses.replace(ours, rescore_window=0),
            f"ours: + rescore window {ours.rescore_window:,}": ours,
        }
        results: dict[str, list[float]] = {name: [] for name in variants}
        for round_ in (1, 2):
            for name, params in variants.items():
                samples, mean = ask(db, qs, params, args.k)
                results[name] += samples
                p = percentiles(samples)
                print(
                    f"  round {round_} {name}: p50 {p['p50']:.1f} p95 {p['p95']:.1f} p99 {p['p99']:.1f} ms, "
                    f"{mean:.1f} candidates a query",
                    flush=True,
                )
        db.dispose()
    base = percentiles(results["baseline: no selection budget"])
    print(f"\nBM25 stage at {args.size:,} memories ({args.queries} queries x 2 rounds, k x 4 candidates)")
    for name, samples in results.items():
        p = percentiles(samples)
        print(
            f"  {name:<38} p50 {p['p50']:6.1f}  p95 {p['p95']:6.1f}  p99 {p['p99']:6.1f} ms  "
            f"p95 ratio {p['p95'] / base['p95']:.2f}"
        )


if __name__ == "__main__":
    main()
