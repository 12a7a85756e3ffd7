"""The gateway's `mnemoflow_memories{sector,tier}` gauge (services/gateway/metrics.py): the store's memories by
sector and tier, read from a real database with the maintenance role, at most once a minute."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from services.gateway.metrics import TiersCollector
from shared.storage.memories import tier_counts
from tests.integration.helpers import add

pytestmark = pytest.mark.integration


def sampled(collector: TiersCollector) -> dict[tuple[str, str], float]:
    (family,) = collector.collect()
    assert family.name == "mnemoflow_memories"
    return {(s.labels["sector"], s.labels["tier"]): s.value for s in family.samples}


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
