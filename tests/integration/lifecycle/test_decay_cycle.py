"""Decay cycles on real PostgreSQL: formulas, tiers, compression, fingerprints, regeneration, locks, crashes.

Time is injected (`CycleOptions.now`), never waited for. The cycle is store-wide, so these tests use a store
of their own and each reads its rows' state right before the cycle it checks.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import text

from shared.api.memories import MemoryCreate
from shared.api.query import QueryFilters, RetrievalOptions
from shared.db import schema_session
from shared.embedding import SyntheticEmbedder
from shared.lifecycle import compression, formulas
from shared.lifecycle.activity import active_queries, query_finished, query_started
from shared.lifecycle.decay_cycle import CycleOptions, DecayCycle, format_line
from shared.lifecycle.reinforcement import regenerate
from shared.memory.engine import MemoryEngine
from shared.memory.sectors import SECTORS
from shared.retrieval.service import Retriever
from shared.storage import decay_runs
from shared.storage.locks import Lock
from shared.storage.sector_models import ensure_store_model
from shared.tenancy import DbRole
from tests.integration.helpers import search

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
DIM = 384
NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def decay_store(make_store, settings):
    """A store of its own, as the role decay runs as (maintenance: every tenant's rows); tests write their
    memories with it too, and read as a tenant through `decay_tenants`."""
    url, _ = make_store("decay")
    embedder = SyntheticEmbedder(dim=DIM)
    with schema_session(settings.model_copy(update={"database_url": url}), "mnemoflow.tests.decay") as s:
        ensure_store_model(s, embedder, min_dim=settings.min_vector_dim, max_dim=settings.max_vector_dim)
    _, database = make_store("decay", role=DbRole.MAINTENANCE)
    return url, database, MemoryEngine(settings, embedder)


@pytest.fixture(scope="module")
def decay_tenants(make_store, decay_store):
    """The decay store as the app role (a tenant's queries and their regeneration)."""
    return make_store("decay")[1]


@pytest.fixture(scope="module")
def cycle_settings(settings):
    return settings.model_copy(update={"decay_sleep_ms": 0, "decay_threads": 2})


def make_cycle(database, cycle_settings, **kw) -> DecayCycle:
    return DecayCycle(database, cycle_settings, dict.fromkeys(SECTORS, DIM), **kw)


def insert(database, engine, tenant: str, contents: list[str]) -> list[uuid.UUID]:
    """Bulk-store memories, then merge them into the index (so their BM25 terms are counted)."""
    with database.session() as s:
        prepared, _ = engine.prepare([MemoryCreate(content=c) for c in contents], tenant)
        refs = engine.store(s, prepared, settle=False)
    while True:
        with database.session() as s:
            moved, _ = engine.merge_fresh(s, limit=5000)
        if moved == 0:
            return [r.id for r in refs]


def state(database, tenant: str) -> dict[uuid.UUID, dict]:
    with database.session() as s:
        rows = s.execute(
            text(
                "SELECT id, salience, recall_lift, coactivations, last_seen_at, decay_lambda, tier, compression, "
                "vector_dim, "
                "summary, content, fingerprint FROM memories WHERE user_id = :u"
            ),
            {"u": tenant},
        ).all()
    return {r.id: dict(r._mapping) for r in rows}


def expected(row: dict, rules: formulas.TierRules, now: datetime) -> tuple[str, float, float]:
    """The seed's formulas in Python: (tier, decay factor, new salience)."""
    days = max(0.0, (now - row["last_seen_at"]).total_seconds() / 86400)
    salience = float(np.float32(row["salience"]))  # the stored real, not its shortest decimal text
    eff = formulas.effective_salience(salience, row["coactivations"])
    tier = formulas.classify_tier(days, eff, row["coactivations"], rules)
    lam = rules.lambda_of(tier) * formulas.sector_scale(row["decay_lambda"])
    f = formulas.decay_factor(lam, days, eff)
    return tier, f, formulas.decayed_salience(salience, f)


def bm25_consistent(database, tenant: str) -> None:
    """term_stats / tenant_stats equal a recount over the tenant's memories (each counted from when it is stored,
    fresh or settled, compressed or fingerprinted)."""
    with database.session() as s:
        drift = s.execute(
            text(
                """
                WITH stored AS (
                    SELECT m.* FROM memories m WHERE m.user_id = :u
                ), recount AS (
                    SELECT t.lexeme, count(*) AS df FROM stored, unnest(stored.search) AS t GROUP BY t.lexeme
                )
                SELECT count(*) FROM recount r FULL JOIN (SELECT * FROM term_stats WHERE user_id = :u AND df <> 0) ts
                  ON ts.lexeme = r.lexeme WHERE r.df IS DISTINCT FROM ts.df
                """
            ),
            {"u": tenant},
        ).scalar_one()
        docs = s.execute(
            text(
                """
                SELECT (SELECT documents FROM tenant_stats WHERE user_id = :u) AS counted,
                       (SELECT total_length FROM tenant_stats WHERE user_id = :u) AS counted_length,
                       count(*) AS stored, sum(length(m.search)) AS length
                FROM memories m WHERE m.user_id = :u
                """
            ),
            {"u": tenant},
        ).one()
    assert drift == 0
    assert (docs.counted, docs.counted_length) == (docs.stored, docs.length)


def vectors_of(database, memory_id: uuid.UUID) -> list[tuple[str, int]]:
    with database.session() as s:
        rows = s.execute(
            text("SELECT sector, dim FROM memory_vectors WHERE memory_id = :id ORDER BY sector"), {"id": memory_id}
        ).all()
    return [(r.sector, r.dim) for r in rows]


def test_a_full_cycle_follows_the_seed_formulas_row_by_row(decay_store, cycle_settings, tenant):
    _, database, engine = decay_store
    contents = [
        f"Note {i}: the {['deploy', 'budget', 'garden', 'concert', 'recipe'][i % 5]} plan changed after "
        f"meeting {i % 17}. Everyone agreed. Follow up on item {i % 23} next week."
        for i in range(3000)
    ]
    insert(database, engine, tenant, contents)
    with database.session() as s:  # a spread of salience, activity and age
        s.execute(
            text(
                """
                UPDATE memories SET salience = (abs(hashtext(id::text)) % 1000) / 1000.0,
                    recall_lift = (abs(hashtext(id::text)) % 1000) / 1000.0 * (abs(hashtext(id::text || 'l')) % 3) / 2,
                    coactivations = abs(hashtext(id::text || 'c')) % 9,
                    last_seen_at = CAST(:now AS timestamptz)
                                   - make_interval(secs => abs(hashtext(id::text || 'd')) % 90 * 86400.0)
                WHERE user_id = :u
                """
            ),
            {"u": tenant, "now": NOW},
        )
    before = state(database, tenant)
    rules = cycle_settings.tiers
    run = make_cycle(database, cycle_settings).run(
        options=CycleOptions(trigger="operator", ratio=1.0, now=NOW, step_rows=700)
    )
    after = state(database, tenant)

    assert run["status"] == "succeeded"
    want_tiers = {"hot": 0, "warm": 0, "cold": 0}
    want_compressed = want_fingerprinted = 0
    for memory_id, row in before.items():
        tier, f, salience = expected(row, rules, NOW)
        want_tiers[tier] += 1
        got = after[memory_id]
        assert got["tier"] == tier, memory_id
        assert got["salience"] == pytest.approx(salience, rel=1e-5, abs=1e-6), memory_id
        # the recall lift is part of the salience: it decays by the same factor (and is never above it)
        lift = 0.0 if salience == 0.0 else min(float(np.float32(row["recall_lift"])) * f, salience)
        assert got["recall_lift"] == pytest.approx(lift, rel=1e-5, abs=1e-6), memory_id
        # ranking reads the factor the cycle applies (retrieval.scoring's Aging)
        days = max(0.0, (NOW - row["last_seen_at"]).total_seconds() / 86400)
        aged = formulas.Aging(rules).factor(
            float(np.float32(row["salience"])), row["coactivations"], row["decay_lambda"], days
        )
        assert aged == pytest.approx(f, rel=1e-6)
        assert got["content"] == row["content"]  # never lost
        if tier != "hot" and f < cycle_settings.decay_cold_threshold:
            want_fingerprinted += 1
            assert got["compression"] == "fingerprinted"
            assert got["summary"] == compression.fingerprint_summary(row["content"])
            assert vectors_of(database, memory_id) == []  # the fingerprint lives on the row
            assert got["fingerprint"] is not None and got["fingerprint"].dimensions() == cycle_settings.fingerprint_dim
        elif tier != "hot" and f < cycle_settings.compression_threshold:
            want_compressed += 1
            rung = compression.compression_target(DIM, DIM, f, [384, 192, 96])
            assert (got["compression"], got["vector_dim"]) == ("compressed", rung)
            assert got["summary"] == compression.compress_summary(row["content"], f)
            assert {d for _, d in vectors_of(database, memory_id)} == {rung}
        else:
            assert (got["compression"], got["summary"]) == ("full", None)
    assert want_compressed > 100 and want_fingerprinted > 100 and all(want_tiers.values())  # the spread covers all
    # The run's counts are the whole store's; this tenant's rows are a subset of what it processed.
    assert run["processed"] >= len(before)
    assert run["compressed"] >= want_compressed and run["fingerprinted"] >= want_fingerprinted
    with database.session() as s:
        assert run["segments"] == s.execute(text("SELECT count(DISTINCT primary_sector) FROM memories")).scalar_one()
    line = format_line(run)
    assert line.startswith(f"[decay] {run['changed']}/{run['processed']} | tiers: hot={run['hot']} ")
    assert f"compressed={run['compressed']} fingerprinted={run['fingerprinted']}" in line
    assert line.endswith(f"across {run['segments']} segments")
    bm25_consistent(database, tenant)

    # A second pass over compressed rows moves them down the ladder, never up.
    later = make_cycle(database, cycle_settings).run(
        options=CycleOptions(trigger="operator", ratio=1.0, now=NOW + timedelta(days=30))
    )
    assert later["status"] == "succeeded"
    again = state(database, tenant)
    for memory_id, row in after.items():
        if row["compression"] == "compressed":
            assert again[memory_id]["compression"] in ("compressed", "fingerprinted")
            assert (again[memory_id]["vector_dim"] or 0) <= row["vector_dim"]
    bm25_consistent(database, tenant)


def test_a_batch_cycle_takes_the_ratio_of_each_segment(decay_store, cycle_settings, tenant):
    _, database, engine = decay_store
    insert(database, engine, tenant, [f"Batch ratio memory number {i} about tea" for i in range(400)])
    with database.session() as s:
        sizes = dict(s.execute(text("SELECT primary_sector, count(*) FROM memories GROUP BY 1")).all())
    run = make_cycle(database, cycle_settings).run(options=CycleOptions(trigger="operator", ratio=0.1, now=NOW))
    assert run["processed"] == sum(max(1, int(n * 0.1)) for n in sizes.values())
    assert run["segments"] == len(sizes)


def test_compressed_memories_stay_findable_and_regenerate(decay_store, decay_tenants, cycle_settings, tenant):
    _, database, engine = decay_store
    mine = decay_tenants.bound(tenant)
    texts = [
        "Quarterly budget review moved to the blue meeting room on Thursday",
        "The espresso machine on floor three needs descaling every month",
        "Grandma's lemon cake recipe uses two cups of flour and a pinch of salt",
    ]
    ids = insert(database, engine, tenant, texts)
    compressed_id, fingerprinted_id, untouched_id = ids
    with database.session() as s:
        lam = dict(s.execute(text("SELECT id, decay_lambda FROM memories WHERE id = ANY(:ids)"), {"ids": ids}).all())
        # warm (salience 0.5): f = exp(-0.02 x scale x days / 0.6) = exp(-0.5) = 0.61: 384 x 0.61 = 233 -> 192
        days = 0.5 * 0.6 / (0.02 * formulas.sector_scale(lam[compressed_id]))
        s.execute(
            text("UPDATE memories SET salience = 0.5, last_seen_at = :t WHERE id = :id"),
            {"t": NOW - timedelta(days=days), "id": compressed_id},
        )
        s.execute(
            text("UPDATE memories SET salience = 0.2, last_seen_at = :t WHERE id = :id"),
            {"t": NOW - timedelta(days=400), "id": fingerprinted_id},
        )
        s.execute(
            text("UPDATE memories SET salience = 0.9, last_seen_at = :t WHERE id = :id"), {"t": NOW, "id": untouched_id}
        )
    make_cycle(database, cycle_settings).run(options=CycleOptions(trigger="operator", ratio=1.0, now=NOW))
    rows = state(database, tenant)
    assert rows[compressed_id]["compression"] == "compressed" and rows[compressed_id]["vector_dim"] == 192
    assert rows[fingerprinted_id]["compression"] == "fingerprinted"
    assert rows[untouched_id]["compression"] == "full"

    retriever = Retriever(cycle_settings, engine.embedder)

    def ask(q: str):
        with mine.reading() as s:
            return search(retriever, s, tenant, q, k=3, filters=QueryFilters(min_score=0.0))

    # The compressed memory is found by meaning on its rung's index (the query pooled the same way) ...
    with mine.reading() as s:
        dense_only = search(
            retriever,
            s,
            tenant,
            texts[0],
            k=3,
            filters=QueryFilters(min_score=0.0),
            options=RetrievalOptions(lexical=False),
        )
    top = dense_only.matches[0][0]
    assert top.id == compressed_id and top.dense_similarity == pytest.approx(1.0, abs=1e-3)
    # ... the fingerprinted one by its original words (a hash vector is not searched by meaning).
    hit = next(c for c, _ in ask("espresso machine descaling").matches if c.id == fingerprinted_id)
    assert hit.lexical_rank == 1 and hit.dense_rank is None

    with mine.session() as s:
        regenerated = regenerate(engine, s, tenant, [compressed_id, fingerprinted_id, untouched_id], boost=0.5)
    assert sorted(regenerated) == sorted([compressed_id, fingerprinted_id])
    rows_after = state(database, tenant)
    for memory_id in regenerated:
        got = rows_after[memory_id]
        assert (got["compression"], got["vector_dim"], got["summary"], got["tier"]) == ("full", None, None, "warm")
        assert got["fingerprint"] is None
        assert got["salience"] == pytest.approx(min(1.0, rows[memory_id]["salience"] + 0.5), abs=1e-6)
        assert {d for _, d in vectors_of(database, memory_id)} == {DIM}
    assert len(vectors_of(database, fingerprinted_id)) == len(
        engine.prepare([MemoryCreate(content=texts[1])], tenant)[0][0].sectors
    )  # every sector's vector is back
    hit = next(c for c, _ in ask("espresso machine descaling").matches if c.id == fingerprinted_id)
    assert hit.dense_rank is not None
    bm25_consistent(database, tenant)


def test_two_cycles_at_once_one_skips(decay_store, cycle_settings, tenant):
    _, database, engine = decay_store
    insert(database, engine, tenant, [f"Concurrency memory {i} about lighthouses" for i in range(300)])
    first_is_running = threading.Event()
    release = threading.Event()

    def hold(_segment: int) -> None:
        first_is_running.set()
        release.wait(10)

    results = {}
    first = threading.Thread(
        target=lambda: results.setdefault(
            "first",
            make_cycle(database, cycle_settings).run(
                options=CycleOptions(trigger="operator", ratio=1.0, now=NOW, step_rows=100, after_step=hold)
            ),
        )
    )
    first.start()
    assert first_is_running.wait(30)
    second = make_cycle(database, cycle_settings).run(options=CycleOptions(trigger="operator", ratio=1.0, now=NOW))
    release.set()
    first.join(30)
    assert (second["status"], second["reason"]) == ("skipped", "another decay cycle is running")
    assert results["first"]["status"] == "succeeded"


def test_a_second_delivery_of_an_operators_run_leaves_it_as_it_is(decay_store, cycle_settings, tenant):
    # The sweeper re-sends an operator's run still queued after the stall time (its first message may have been
    # lost when the broker was down); a delivery that finds the run running or ended must not touch it.
    _, database, engine = decay_store
    insert(database, engine, tenant, [f"Redelivered run memory {i} about harbours" for i in range(300)])
    with database.session() as s:
        run_id = decay_runs.create_run(s, trigger="operator", ratio=1.0)
    running, release = threading.Event(), threading.Event()

    def hold(_segment: int) -> None:
        running.set()
        release.wait(10)

    options = CycleOptions(trigger="operator", ratio=1.0, now=NOW, step_rows=100)
    results = {}
    first = threading.Thread(
        target=lambda: results.setdefault(
            "first", make_cycle(database, cycle_settings).run(run_id, replace(options, after_step=hold))
        )
    )
    first.start()
    assert running.wait(30)
    during = make_cycle(database, cycle_settings).run(run_id, options)  # the lock is held: it cannot run it
    with database.session() as s:
        assert decay_runs.orphaned_runs(s) == []  # running under a live lock: the sweeper leaves it
    release.set()
    first.join(30)
    assert during["status"] == "running"  # left to the delivery that runs it, not marked skipped
    assert results["first"]["status"] == "succeeded"
    after = make_cycle(database, cycle_settings).run(run_id, options)  # ended: returned as it is
    assert after == results["first"]


def test_a_run_redelivered_after_it_succeeded_decays_nothing_twice(decay_store, cycle_settings, tenant):
    # A scheduled run's id comes from its message (workers/tasks.py), so a redelivery names the same run.
    _, database, engine = decay_store
    insert(database, engine, tenant, [f"Redelivered success memory {i} about canals" for i in range(200)])
    run_id = uuid.uuid4()
    options = CycleOptions(trigger="operator", ratio=1.0, now=NOW)
    first = make_cycle(database, cycle_settings).run(run_id, options)
    decayed = state(database, tenant)
    again = make_cycle(database, cycle_settings).run(run_id, options)
    assert first["status"] == "succeeded" and first["id"] == run_id
    assert again == first
    assert state(database, tenant) == decayed


def test_a_scheduled_cycle_waits_for_quiet_and_the_cooldown(decay_store, cycle_settings, settings):
    _, database, _ = decay_store
    busy = make_cycle(database, cycle_settings, active_queries=lambda: 2).run(options=CycleOptions(now=NOW))
    assert (busy["status"], busy["reason"]) == ("skipped", "2 queries are active")
    quiet = make_cycle(database, cycle_settings, active_queries=lambda: 0)
    done = quiet.run(options=CycleOptions(trigger="operator", ratio=0.01))
    assert done["status"] == "succeeded"
    cooling = quiet.run(options=CycleOptions())
    assert cooling["status"] == "skipped" and cooling["reason"].startswith("cooldown")
    # the active-query count lives in the real Redis, and a dead gateway's token expires
    import redis

    client = redis.Redis.from_url(settings.redis_url)
    token = query_started(client, ttl_seconds=30)
    assert active_queries(client) >= 1
    query_finished(client, token)
    query_started(client, ttl_seconds=0.05)
    time.sleep(0.1)
    assert active_queries(client) == 0


CHILD = """
import sys, time
from datetime import datetime
from shared.config import Settings
from shared.db import Database, create_db_engine
from shared.lifecycle.decay_cycle import CycleOptions, DecayCycle
from shared.memory.sectors import SECTORS
from shared.tenancy import DbRole
settings = Settings(database_url=sys.argv[1], embedding_provider="synthetic", decay_sleep_ms=0, decay_threads=1)
db = Database(create_db_engine(settings, "decay-child", pool_size=2, role=DbRole.MAINTENANCE))
DecayCycle(db, settings, dict.fromkeys(SECTORS, 384)).run(options=CycleOptions(
    trigger="operator", ratio=1.0, now=datetime.fromisoformat(sys.argv[2]), step_rows=150,
    after_step=lambda _: time.sleep(0.25)))
"""


@pytest.mark.parametrize("resumed_by", ["the next scheduled cycle", "the sweeper"])
def test_a_cycle_killed_midway_loses_nothing_and_is_finished(decay_store, cycle_settings, tenant, resumed_by):
    url, database, engine = decay_store
    insert(database, engine, tenant, [f"Crash test memory {i}: the ferry timetable changed" for i in range(1500)])
    with database.session() as s:
        s.execute(
            text(
                "UPDATE memories SET salience = 0.3 + (abs(hashtext(id::text)) % 600) / 1000.0, "
                "last_seen_at = CAST(:now AS timestamptz) - interval '20 days'"
            ),
            {"now": NOW},
        )
        total = s.execute(text("SELECT count(*) FROM memories")).scalar_one()
    before = state(database, tenant)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, url, NOW.isoformat()], cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)}
    )
    try:
        deadline = time.monotonic() + 60
        processed = 0
        while time.monotonic() < deadline and not processed > 0:
            time.sleep(0.1)
            with database.session() as s:
                processed = s.execute(
                    text("SELECT coalesce(max(processed), 0) FROM decay_runs WHERE status = 'running'")
                ).scalar_one()
        assert 0 < processed < total, "the child should be mid-cycle"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    with database.session() as s:
        interrupted = s.execute(text("SELECT id, processed FROM decay_runs WHERE status = 'running'")).one()
    assert 0 < interrupted.processed < total
    # The server ends the killed child's sessions, and so frees its cycle lock, when it notices the client is
    # gone: not at once. Until then a new cycle rightly skips ("another decay cycle is running").
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with database.session() as s:
            held = s.execute(
                text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = :k AND granted"),
                {"k": int(Lock.DECAY_CYCLE)},
            ).scalar_one()
        if not held:
            break
        time.sleep(0.05)

    if resumed_by == "the sweeper":  # it sees the run running with nobody holding the lock, and sends it again
        with database.session() as s:
            orphans = decay_runs.orphaned_runs(s)
        assert [o["id"] for o in orphans] == [interrupted.id]
        run = make_cycle(database, cycle_settings).run(interrupted.id, CycleOptions(trigger="operator", now=NOW))
        assert run["id"] == interrupted.id and run["status"] == "succeeded" and run["processed"] == total
    else:  # a scheduled cycle finishes the interrupted plan before a plan of its own
        run = make_cycle(database, cycle_settings).run(options=CycleOptions(now=NOW))
        assert run["status"] == "succeeded" and run["processed"] == total
        with database.session() as s:
            old = s.execute(
                text("SELECT status, resumed_by FROM decay_runs WHERE id = :id"), {"id": interrupted.id}
            ).one()
        assert (old.status, old.resumed_by) == ("failed", run["id"])
        assert run["reason"] == f"finished the plan of interrupted run {interrupted.id}"
    rules = cycle_settings.tiers
    after = state(database, tenant)
    for memory_id, row in before.items():  # every row decayed exactly once: none skipped, none twice
        _, _, salience = expected(row, rules, NOW)
        assert after[memory_id]["salience"] == pytest.approx(salience, rel=1e-5, abs=1e-6)
    bm25_consistent(database, tenant)
    assert math.isfinite(run["duration_ms"])
