"""The gateway's gauges read from the store (services/gateway/metrics.py), from a real database with the maintenance
role: `mnemoflow_memories{sector,tier}` (the store's memories by sector and tier, at most once a minute) and
`mnemoflow_fresh_vectors{sector}` (the fresh tier's backlog, at most every 15 s)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from services.gateway.metrics import FreshCollector, StoreCounts, TiersCollector
from shared.api.memories import MemoryCreate
from shared.memory.sectors import SECTORS
from shared.storage import locks
from shared.storage.locks import Lock
from shared.storage.memories import tier_counts
from shared.storage.vectors import fresh_by_sector
from tests.integration.helpers import add, wait_until

pytestmark = pytest.mark.integration


def sampled(collector: StoreCounts) -> dict[tuple[str, ...], float]:
    (family,) = collector.collect()
    assert family.name == collector.NAME
    return {tuple(s.labels[name] for name in collector.LABELS): s.value for s in family.samples}


def test_tiers_are_counted_store_wide_and_read_at_most_once_a_minute(db, maintenance, engine, tenant):
    add(db, engine, tenant, "Grey herons nest in alder trees by the mill")
    collector = TiersCollector(maintenance)
    first = sampled(collector)
    with maintenance.session() as s:
        truth = {(sector, tier): n for sector, tier, n in tier_counts(s)}
    assert first == truth and sum(first.values()) >= 1
    assert {tier for _, tier in first} <= {"hot", "warm", "cold"}

    memory, _ = add(db, engine, tenant, "The warden paints the hide's signs in May")
    with db.session() as s:
        s.execute(text("UPDATE memories SET tier = 'cold' WHERE id = :id"), {"id": memory["id"]})
    assert sampled(collector) == first  # read less than a minute ago: the last reading
    collector.MAX_AGE_SECONDS = 0.0
    now = sampled(collector)
    assert now[(memory["primary_sector"], "cold")] == first.get((memory["primary_sector"], "cold"), 0) + 1


def fresh_rows(maintenance, tenant: str | None = None) -> dict[str, int]:
    """Vectors waiting for the merge by sector, counted on the vectors themselves (of one tenant, or all)."""
    with maintenance.session() as s:
        rows = s.execute(
            text(
                "SELECT sector, count(*) FROM memory_vectors WHERE NOT indexed "
                "AND (CAST(:u AS text) IS NULL OR user_id = :u) GROUP BY sector"
            ),
            {"u": tenant},
        ).all()
    return {sector: n for sector, n in rows}


def test_the_fresh_tier_is_counted_by_sector_until_its_vectors_are_indexed(db, maintenance, engine, tenant):
    items = [
        MemoryCreate(content=f"Ringing log {i}: a grey heron fledgling weighed at the mill pond") for i in range(12)
    ]
    collector = FreshCollector(maintenance)
    with maintenance.engine.connect() as lock_conn:
        # No merge run (a worker's) changes the tier meanwhile: one may be running now, asked for by an earlier test.
        assert wait_until(lambda: locks.try_hold(lock_conn, Lock.MERGE), timeout=60)
        try:
            with db.session() as s:  # a bulk write: its vectors wait for the merge
                engine.store(s, engine.prepare(items, tenant)[0], settle=False)
            waiting, mine = fresh_rows(maintenance), fresh_rows(maintenance, tenant)
            first = sampled(collector)
            assert first == {(sector,): waiting.get(sector, 0) for sector in SECTORS}  # every sector, 0 included
            assert sum(mine.values()) >= len(items)
            with db.session() as s:  # the tenant's own count (GET /sectors), under its row-level security
                assert fresh_by_sector(s, tenant) == mine

            collector.MAX_AGE_SECONDS = 3600.0
            with maintenance.session() as s:  # indexed, as the merge marks them (the HNSW indexes take them in)
                s.execute(text("UPDATE memory_vectors SET indexed = true WHERE user_id = :u"), {"u": tenant})
            assert sampled(collector) == first  # read less than an hour ago: the last reading
            collector.MAX_AGE_SECONDS = 0.0
            assert sampled(collector) == {(sector,): waiting.get(sector, 0) - mine.get(sector, 0) for sector in SECTORS}
        finally:
            locks.release(lock_conn, Lock.MERGE)
