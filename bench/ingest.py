"""Bulk ingest throughput: POST /memory/batch until every memory is stored and queryable.

Baselines, measured in the same run on the same machine:
- the store's own rate: a plain COPY of the same rows (memories and their per-sector vectors) into the
  same HNSW-indexed tables of a fresh database (and unindexed, the floor);
- the model's own rate: the provider embedding the same texts in as many processes as the worker has,
  nothing else running (`raw model`). End to end / raw model is the pipeline's overhead.

    python -m bench.ingest --sizes 10000 100000                 # synthetic embeddings
    python -m bench.ingest --provider local --sizes 5000         # the default MiniLM model
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time
import uuid

import httpx
import numpy as np
import psycopg
from pgvector import Vector
from pgvector.psycopg import register_vector

from bench.common import bench_settings, corpus, fresh_database, plain_dsn, servers, stack
from shared.api.memories import MemoryCreate
from shared.config import Settings
from shared.db import schema_session
from shared.embedding.factory import create_embedder, embedder_for
from shared.memory.engine import MemoryEngine
from shared.storage.sector_models import ensure_store_model

USER = "bench"


def baseline_copy(database_url: str, texts: list[str], *, indexed: bool) -> tuple[float, float]:
    """COPY the same prepared rows into the same tables; returns (seconds, prepare_seconds).

    indexed=True puts every vector through the live HNSW index (the issue's baseline);
    indexed=False is the unindexed COPY floor (what the fresh tier pays).
    """
    settings = bench_settings(database_url)
    engine = MemoryEngine(settings, create_embedder(settings))
    with schema_session(settings, "mnemoflow.bench") as session:  # the model's HNSW index, as in a real store
        ensure_store_model(session, engine.embedder)
    started = time.perf_counter()
    prepared, _ = engine.prepare([MemoryCreate(content=t) for t in texts], USER)
    prepare_s = time.perf_counter() - started
    ids = [uuid.uuid4() for _ in prepared]
    with psycopg.connect(plain_dsn(database_url)) as conn:
        register_vector(conn)
        started = time.perf_counter()
        with conn.cursor() as cur:
            with cur.copy(
                "COPY memories (id, user_id, content, content_hash, primary_sector, sectors, tags, meta, salience, "
                "decay_lambda, confidence, classification_confidence) FROM STDIN WITH (FORMAT BINARY)"
            ) as copy:
                copy.set_types(
                    [
                        "uuid",
                        "text",
                        "text",
                        "text",
                        "text",
                        "text[]",
                        "text[]",
                        "jsonb",
                        "float4",
                        "float4",
                        "float4",
                        "float4",
                    ]
                )
                for memory_id, m in zip(ids, prepared, strict=True):
                    copy.write_row(
                        (
                            memory_id,
                            m.user_id,
                            m.content,
                            m.content_hash,
                            m.primary_sector,
                            list(m.sectors),
                            list(m.tags),
                            json.dumps(m.meta),
                            m.salience,
                            m.decay_lambda,
                            m.confidence,
                            m.classification_confidence,
                        )
                    )
            with cur.copy(
                "COPY memory_vectors (memory_id, sector, user_id, dim, model, indexed, embedding) "
                "FROM STDIN WITH (FORMAT BINARY)"
            ) as copy:
                copy.set_types(["uuid", "text", "text", "int2", "text", "bool", "vector"])
                for memory_id, m in zip(ids, prepared, strict=True):
                    for sector, sv in m.vectors.items():
                        vector = Vector(np.asarray(sv.vector, dtype=np.float32))
                        copy.write_row((memory_id, sector, USER, sv.vector.shape[0], sv.model, indexed, vector))
        conn.commit()
        return time.perf_counter() - started, prepare_s


def _embed_share(args: tuple[str, list[str]]) -> float:
    """In a fresh process: build the provider, warm it up, embed the share; returns seconds spent embedding."""
    provider, texts = args
    settings = Settings(embedding_provider=provider)  # type: ignore[arg-type]
    embedder = embedder_for(settings, provider, dim=None)
    embedder.embed(texts[:32])
    started = time.perf_counter()
    for start in range(0, len(texts), settings.chunk_size):  # the workers' chunk size
        embedder.embed(texts[start : start + settings.chunk_size])
    return time.perf_counter() - started


def raw_model_rate(provider: str, texts: list[str], processes: int) -> float:
    """Sentences/s of the provider alone in `processes` processes (the worker's pool size), texts split evenly."""
    shares = [(provider, texts[i::processes]) for i in range(processes)]
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        seconds = pool.map(_embed_share, shares)
    return len(texts) / max(seconds)


def ours(
    gateway: str, database_url: str, texts: list[str], request_size: int, *, settle: bool = True, user: str = USER
) -> tuple[float, float]:
    """Seconds from the first POST /memory/batch until every job succeeded (stored and queryable),
    and until the background merge has indexed and linked everything (settled; with settle=False, not waited for:
    the queryable figure again)."""
    with httpx.Client(base_url=gateway, timeout=300) as client:
        started = time.perf_counter()
        jobs = []
        for start in range(0, len(texts), request_size):
            items = [{"content": t} for t in texts[start : start + request_size]]
            response = client.post("/memory/batch", json={"items": items, "user_id": user})
            response.raise_for_status()
            jobs.append(response.json()["job_id"])
        # One job polled at a time (in the order sent), so the polling itself costs the stack little.
        for job_id in jobs:
            while (job := client.get(f"/jobs/{job_id}", params={"user_id": user}).json())["status"] != "succeeded":
                if job["status"] == "failed":
                    raise RuntimeError(f"job failed: {job}")
                time.sleep(0.1)
        queryable = time.perf_counter() - started
        probe = texts[len(texts) // 2]
        found = client.post("/memory/query", json={"query": probe, "user_id": user, "k": 5}).json()["matches"]
        if not any(m["content"] == probe for m in found):
            print(f"  warning: probe memory not in top 5 for its own text: {probe!r}")
    if not settle:
        return queryable, queryable
    with psycopg.connect(plain_dsn(database_url), autocommit=True) as conn:
        while conn.execute("SELECT count(*) FROM memory_vectors WHERE NOT indexed").fetchone()[0]:  # type: ignore[index]
            time.sleep(0.5)
    return queryable, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--request-size", type=int, default=5_000, help="items per POST /memory/batch")
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes")
    parser.add_argument(
        "--provider",
        default=os.environ.get("MNEMOFLOW_EMBEDDING_PROVIDER", "synthetic"),
        choices=["synthetic", "local", "static"],
        help="embedding provider of the workers and the baselines [synthetic, or $MNEMOFLOW_EMBEDDING_PROVIDER]",
    )
    args = parser.parse_args()
    os.environ["MNEMOFLOW_EMBEDDING_PROVIDER"] = args.provider  # the stack's processes and bench_settings

    rows = []
    with servers() as srv:
        for size in args.sizes:
            texts = corpus(size)
            raw = raw_model_rate(args.provider, texts, args.concurrency)
            hnsw_s, _ = baseline_copy(fresh_database(srv.admin_url, "bench_baseline"), texts, indexed=True)
            plain_s, _ = baseline_copy(fresh_database(srv.admin_url, "bench_baseline"), texts, indexed=False)
            our_url = fresh_database(srv.admin_url, "bench_ingest")
            with stack(our_url, srv.redis_url, concurrency=args.concurrency) as gateway:
                queryable_s, settled_s = ours(gateway, our_url, texts, args.request_size)
            with psycopg.connect(plain_dsn(our_url)) as conn:
                stored = conn.execute("SELECT count(*) FROM memories").fetchone()[0]  # type: ignore[index]
                links = conn.execute("SELECT count(*) FROM waypoints").fetchone()[0]  # type: ignore[index]
            row = (size, size / hnsw_s, size / plain_s, raw, size / queryable_s, size / settled_s)
            rows.append(row)
            print(
                f"[ingest] n={size:,} {args.provider}: raw model {raw:,.0f}/s, COPY into HNSW {row[1]:,.0f}/s, "
                f"COPY unindexed {row[2]:,.0f}/s | ours queryable {row[4]:,.0f}/s ({row[4] / raw:.2f}x raw model, "
                f"{row[4] / row[1]:.2f}x HNSW COPY), settled {row[5]:,.0f}/s ({row[5] / row[1]:.2f}x) "
                f"| stored {stored:,}, waypoints {links:,}",
                flush=True,
            )

    print(f"\nbulk ingest through POST /memory/batch, {args.provider} embeddings, {args.concurrency} worker processes")
    print("  raw model = the provider alone in as many processes; queryable = every job succeeded (fresh tier,")
    print("  searched exactly); settled = merged into HNSW + linked. Rates in memories/s.")
    header = ("n", "raw model", "COPY→HNSW", "COPY plain", "queryable", "settled", "q/raw", "q/HNSW", "settled/HNSW")
    print("{:>9} {:>10} {:>10} {:>11} {:>10} {:>9} {:>7} {:>7} {:>13}".format(*header))
    for size, hnsw, plain, raw, queryable, settled in rows:
        print(
            f"{size:>9,} {raw:>10,.0f} {hnsw:>10,.0f} {plain:>11,.0f} {queryable:>10,.0f} {settled:>9,.0f} "
            f"{queryable / raw:>7.2f} {queryable / hnsw:>7.2f} {settled / hnsw:>13.2f}"
        )


if __name__ == "__main__":
    main()
