"""The hot-tier row cache against real Redis and PostgreSQL: what it answers, and that it never answers stale."""

from __future__ import annotations

import uuid

import pytest
import redis
from sqlalchemy import text

from infra.embedded import free_port
from shared.api.memories import MemoryCreate
from shared.api.query import QueryFilters
from shared.embedding import SyntheticEmbedder
from shared.memory.engine import MemoryEngine
from shared.retrieval.hot_rows import HotRowCache
from shared.retrieval.service import Retriever
from tests.conftest import SEALER
from tests.integration.helpers import search

pytestmark = pytest.mark.integration


@pytest.fixture
def cache(servers):
    client = redis.Redis.from_url(servers["redis_url"])
    yield HotRowCache(client, ttl_seconds=60, sealer=SEALER, prefix=f"test:row:{uuid.uuid4().hex}")
    client.close()


def make_hot(db, memory_id):
    with db.session() as s:
        s.execute(text("UPDATE memories SET tier = 'hot' WHERE id = :id"), {"id": memory_id})


def ask(db, retriever, tenant, q, **kw):
    with db.session() as s:
        return search(retriever, s, tenant, q, k=5, filters=QueryFilters(min_score=0.0), **kw)


def test_a_hot_memory_is_served_from_redis_and_an_edit_is_never_served_stale(db, settings, tenant, cache):
    engine = MemoryEngine(settings, SyntheticEmbedder(dim=384))
    retriever = Retriever(settings, engine.embedder, row_cache=cache)
    with db.session() as s:
        hot, _ = engine.add(s, tenant, MemoryCreate(content="The boiler room key hangs by the north door"))
        warm, _ = engine.add(s, tenant, MemoryCreate(content="The boiler was serviced in March", metadata={"by": "Ed"}))
    make_hot(db, hot["id"])

    first = ask(db, retriever, tenant, "boiler room key")
    assert (cache.hits, cache.misses) == (0, 1)  # only the hot one is looked up; it was not cached yet
    second = ask(db, retriever, tenant, "boiler room key")
    assert (cache.hits, cache.misses) == (1, 1)
    for outcome in (first, second):  # the same answer either way, payload and all
        rows = {row["id"]: row for _, row in outcome.matches}
        assert rows[hot["id"]]["content"] == "The boiler room key hangs by the north door"
        assert rows[warm["id"]]["metadata"] == {"by": "Ed"} and rows[warm["id"]]["document_id"] is None

    with db.session() as s:  # an edit raises the version: the cached payload is never read again
        engine.update(s, tenant, hot["id"], {"content": "The boiler room key hangs by the south door"})
    make_hot(db, hot["id"])
    edited = {row["id"]: row for _, row in ask(db, retriever, tenant, "boiler room key").matches}
    assert edited[hot["id"]]["content"] == "The boiler room key hangs by the south door"
    assert cache.misses == 2

    with db.session() as s:
        engine.delete(s, tenant, hot["id"])
    gone = ask(db, retriever, tenant, "boiler room key")
    assert hot["id"] not in {c.id for c, _ in gone.matches}


def test_a_compressed_row_is_read_from_the_database(db, settings, tenant, cache):
    engine = MemoryEngine(settings, SyntheticEmbedder(dim=384))
    retriever = Retriever(settings, engine.embedder, row_cache=cache)
    with db.session() as s:
        memory, _ = engine.add(s, tenant, MemoryCreate(content="Quarterly inventory of the east warehouse"))
        s.execute(
            text("UPDATE memories SET tier = 'hot', compression = 'compressed', summary = 'inventory' WHERE id = :id"),
            {"id": memory["id"]},
        )
    outcome = ask(db, retriever, tenant, "east warehouse inventory")
    assert outcome.matches[0][1]["summary"] == "inventory"
    assert (cache.hits, cache.misses) == (0, 0)  # not cacheable: its summary changes without a version


def test_a_token_budget_packs_from_hydrated_rows_and_a_redis_outage_costs_only_the_cache(db, settings, tenant):
    dead = HotRowCache(
        redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.2), ttl_seconds=60, sealer=SEALER
    )
    engine = MemoryEngine(settings, SyntheticEmbedder(dim=384))
    retriever = Retriever(settings, engine.embedder, row_cache=dead)
    ids = []
    with db.session() as s:
        for i in range(4):
            memory, _ = engine.add(s, tenant, MemoryCreate(content=f"Lantern festival note {i}: " + "words " * 30))
            ids.append(memory["id"])
    for memory_id in ids:
        make_hot(db, memory_id)
    outcome = ask(db, retriever, tenant, "lantern festival note", token_budget=80)
    assert outcome.packing is not None and 1 <= len(outcome.matches) < 4
    assert all(row["content"].startswith("Lantern festival note") for _, row in outcome.matches)
