"""Decay at scale: memories/s for a full cycle (ratio 1.0), and the storage a memory takes when hot, compressed
and fingerprinted.

    python -m bench.decay                      # 1,000,000 memories for speed, 20,000 for storage
    python -m bench.decay --size 100000 --storage-size 5000

Speed. A store of `--size` memories (a realistic spread of salience, activity and age; one 384-d vector each,
in the fresh tier) is decayed three ways in the same run:
  - baseline: one plain `UPDATE memories SET salience = salience * 0.99` over every row — the floor of any
    set-based pass over the table;
  - the decay pass: `DecayCycle.run(ratio=1.0)` as the beat job runs it (steps, threads, cursor), with
    compression off: tiers, decay factor, salience;
  - a full cycle: `DecayCycle.run(ratio=1.0)` with compression and fingerprinting, as the beat job runs it.
Storage. `--storage-size` memories stored through the engine (vectors per sector, settled into HNSW), measured
with pg_total_relation_size after VACUUM FULL in each state: all full, all compressed (one rung down), all
fingerprinted.
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import psycopg
from sqlalchemy import text

from bench.common import corpus, fresh_database, plain_dsn, servers
from shared.api.memories import MemoryCreate
from shared.config import Settings
from shared.db import Database, create_db_engine, schema_session
from shared.embedding import SyntheticEmbedder
from shared.lifecycle.decay_cycle import CycleOptions, DecayCycle, format_line
from shared.memory.engine import MemoryEngine
from shared.memory.sectors import SECTOR_CONFIGS, SECTORS
from shared.storage.rows import SectorVector
from shared.storage.sector_models import ensure_store_model
from shared.storage.vectors import copy_vectors
from shared.tenancy import DbRole

DIM = 384
WORDS = [
    "tea",
    "budget",
    "garden",
    "concert",
    "recipe",
    "ferry",
    "audit",
    "lisbon",
    "piano",
    "invoice",
    "roof",
    "kubernetes",
    "dentist",
    "launch",
]


def settings_for(url: str) -> Settings:
    return Settings(
        database_url=url, redis_url="redis://unused", embedding_provider="synthetic", decay_sleep_ms=0, decay_threads=2
    )


def populate(url: str, size: int) -> float:
    """`size` memories straight into the tables (generate_series + COPY of random vectors); returns seconds."""
    started = time.perf_counter()
    lambdas = ", ".join(f"'{s}', {c.decay_lambda}" for s, c in SECTOR_CONFIGS.items())
    sectors = "ARRAY[" + ", ".join(f"'{s}'" for s in SECTORS) + "]"
    words = "ARRAY[" + ", ".join(f"'{w}'" for w in WORDS) + "]"
    with psycopg.connect(plain_dsn(url), autocommit=True) as conn:
        conn.execute(
            f"""
            INSERT INTO memories (user_id, content, primary_sector, sectors, content_hash, salience, decay_lambda,
                                  coactivations, last_seen_at, created_at)
            SELECT 'bench-' || (g % 100), 'memory ' || g || ' about the ' || ({words})[1 + g % {len(WORDS)}]
                       || ' and the ' || ({words})[1 + (g / 7) % {len(WORDS)}] || '. It was discussed at length.',
                   s.sector, ARRAY[s.sector], md5(g::text), 0.05 + random() * 0.95,
                   (jsonb_build_object({lambdas}) ->> s.sector)::real, floor(random() * 9)::int,
                   now() - random() * interval '60 days', now() - interval '60 days'
            FROM generate_series(1, {size}) g
            CROSS JOIN LATERAL (SELECT ({sectors})[1 + g % 5] AS sector) s
            """
        )
    settings = settings_for(url)
    db = Database(create_db_engine(settings, "mnemoflow.bench", role=DbRole.MAINTENANCE))  # every tenant's rows
    rng = np.random.default_rng(5)
    with db.engine.connect() as conn:
        ids = conn.exec_driver_sql("SELECT id, user_id, primary_sector FROM memories").all()
    for start in range(0, len(ids), 50_000):
        part = ids[start : start + 50_000]
        vectors = rng.standard_normal((len(part), DIM)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        with db.session() as session:
            copy_vectors(
                session,
                [(i, u, {s: SectorVector("synthetic-hash-v1", v)}) for (i, u, s), v in zip(part, vectors, strict=True)],
                indexed=False,
            )
    db.dispose()
    with psycopg.connect(plain_dsn(url), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return time.perf_counter() - started


def reset_ages(url: str) -> None:
    """The same starting state for every measured pass."""
    with psycopg.connect(plain_dsn(url), autocommit=True) as conn:
        conn.execute(
            "UPDATE memories SET salience = 0.05 + (abs(hashtext(id::text)) % 950) / 1000.0, tier = 'warm', "
            "last_seen_at = now() - (abs(hashtext(id::text || 'd')) % 60) * interval '1 day'"
        )
        conn.execute("VACUUM ANALYZE memories")


def baseline_pass(url: str) -> float:
    with psycopg.connect(plain_dsn(url), autocommit=True) as conn:
        started = time.perf_counter()
        conn.execute("UPDATE memories SET salience = salience * 0.99")
        return time.perf_counter() - started


def cycle(url: str, now: datetime, *, compression: bool) -> dict:
    """One cycle over every row (ratio 1.0), as the beat job runs it: steps, threads, cursor. Without
    compression it is the decay pass alone: tiers, decay factor, salience."""
    settings = settings_for(url)
    if not compression:
        settings = settings.model_copy(update={"compression_threshold": 0.0, "decay_cold_threshold": 0.0})
    db = Database(create_db_engine(settings, "mnemoflow.bench", role=DbRole.MAINTENANCE))  # as the decay task runs
    try:
        return DecayCycle(db, settings, dict.fromkeys(SECTORS, DIM)).run(
            options=CycleOptions(trigger="operator", ratio=1.0, now=now)
        )
    finally:
        db.dispose()


SIZE_SQL = """
SELECT
  pg_total_relation_size('memories') AS memories,
  pg_total_relation_size('memory_vectors') AS vectors,
  pg_total_relation_size('waypoints') AS waypoints
"""


def storage(admin_url: str, size: int) -> None:
    url = fresh_database(admin_url, "mnemoflow_bench_storage")
    settings = settings_for(url)
    engine = MemoryEngine(settings, SyntheticEmbedder(dim=DIM))
    with schema_session(settings, "mnemoflow.bench") as session:
        ensure_store_model(session, engine.embedder)
    tenant = Database(create_db_engine(settings, "mnemoflow.bench")).bound("bench")
    db = Database(create_db_engine(settings, "mnemoflow.bench", role=DbRole.MAINTENANCE))  # merge, decay, checks
    texts = corpus(size)
    for start in range(0, size, 2_000):
        with tenant.session() as session:
            items = [MemoryCreate(content=t) for t in texts[start : start + 2_000]]
            engine.store(session, engine.prepare(items, "bench")[0], settle=False)
    while True:
        with db.session() as session:
            moved, _ = engine.merge_fresh(session, limit=5_000)
        if not moved:
            break
    with db.engine.connect() as conn:
        vectors_per_memory = conn.exec_driver_sql(
            "SELECT count(*)::float / (SELECT count(*) FROM memories) FROM memory_vectors"
        ).scalar_one()

    def measure(label: str) -> dict[str, float]:
        with psycopg.connect(plain_dsn(url), autocommit=True) as conn:
            conn.execute("VACUUM FULL memories")
            conn.execute("VACUUM FULL memory_vectors")
            row = conn.execute(SIZE_SQL).fetchone()
            states = dict(conn.execute("SELECT compression, count(*) FROM memories GROUP BY 1").fetchall())
        assert row is not None
        per = {k: float(v or 0) / size for k, v in zip(("memories", "vectors", "waypoints"), row, strict=True)}
        per["total"] = sum(per.values())
        print(
            f"  {label:<13} {per['total']:>8,.0f} B/memory  (row+text+indexes {per['memories']:,.0f}, "
            f"vectors+HNSW {per['vectors']:,.0f}, waypoints {per['waypoints']:,.0f})  states {states}"
        )
        return per

    print(f"storage, {size:,} memories ({vectors_per_memory:.2f} sector vectors each, {DIM}-d, HNSW-indexed):")
    hot = measure("hot (full)")
    now = datetime.now(UTC)
    cycle = DecayCycle(db, settings, dict.fromkeys(SECTORS, DIM))
    with db.session() as session:  # f = exp(-0.02 x scale x days / 0.6) just under 0.7 for every memory: one rung down
        session.execute(
            text(
                "UPDATE memories SET salience = 0.5, coactivations = 0, "
                "last_seen_at = now() - make_interval(secs => 0.40 * 0.6 / (0.02 * decay_lambda / 0.0098) * 86400)"
            )
        )
    cycle.run(options=CycleOptions(trigger="operator", ratio=1.0, now=now))
    compressed = measure("compressed")
    with db.session() as session:
        session.execute(text("UPDATE memories SET salience = 0.1, last_seen_at = now() - interval '3 years'"))
    cycle.run(options=CycleOptions(trigger="operator", ratio=1.0, now=now + timedelta(seconds=1)))
    fingerprinted = measure("fingerprinted")
    db.dispose()
    tenant.dispose()
    print(
        f"  compressed = {compressed['total'] / hot['total']:.0%} of hot, "
        f"fingerprinted = {fingerprinted['total'] / hot['total']:.0%} of hot (target <= 25%); "
        f"vectors alone: {compressed['vectors'] / hot['vectors']:.0%} and "
        f"{fingerprinted['vectors'] / hot['vectors']:.0%}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1_000_000, help="memories for the speed test")
    parser.add_argument("--storage-size", type=int, default=20_000, help="memories for the storage test")
    args = parser.parse_args()
    with servers() as srv:
        if args.size:
            url = fresh_database(srv.admin_url, "mnemoflow_bench_decay")
            settings = settings_for(url)
            with schema_session(settings, "mnemoflow.bench") as session:
                ensure_store_model(session, SyntheticEmbedder(dim=DIM))
            seconds = populate(url, args.size)
            print(f"decay speed, {args.size:,} memories (populated in {seconds:.0f}s):")
            now = datetime.now(UTC)
            reset_ages(url)
            base = baseline_pass(url)
            print(f"  baseline  UPDATE salience*0.99, all rows:  {args.size / base:>10,.0f} memories/s  ({base:.1f}s)")
            reset_ages(url)
            passed = cycle(url, now, compression=False)
            elapsed = float(passed["duration_ms"]) / 1000
            print(
                f"  decay pass (tiers, f, salience), all rows: {passed['processed'] / elapsed:>10,.0f} memories/s"
                f"  ({elapsed:.1f}s)  = {base / elapsed:.2f}x the baseline's rate"
            )
            reset_ages(url)
            run = cycle(url, now, compression=True)
            ms = float(run["duration_ms"])
            print(
                f"  full cycle (ratio 1.0, with compression):  {run['processed'] / (ms / 1000):>10,.0f} memories/s"
                f"  ({ms / 1000:.1f}s; compressed {run['compressed']:,}, fingerprinted {run['fingerprinted']:,})"
            )
            print(f"  log: {format_line(run)}")
        if args.storage_size:
            storage(srv.admin_url, args.storage_size)


if __name__ == "__main__":
    main()
