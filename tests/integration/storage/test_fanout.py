"""The second hop's bound (`MNEMOFLOW_ACTIVATION_FANOUT`): a memory one hop from the hits lends the second hop along
its strongest links only; the hits' own links are all read."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from shared.api.memories import MemoryCreate
from shared.memory.sectors import SECTORS
from shared.storage import neighbours
from shared.storage.rows import SectorVector

pytestmark = pytest.mark.integration


@pytest.fixture
def star(db, engine, tenant):
    """A hit H with four links of its own, and X one hop away with five more links beyond it (weights 0.9 … 0.5);
    H–X is X's strongest link (0.95)."""
    names = ["hit", "x", *(f"h{i}" for i in range(4)), *(f"y{i}" for i in range(5))]
    items = [MemoryCreate(content=f"memory {name} of the star") for name in names]
    with db.session() as s:
        refs = engine.store(s, engine.prepare(items, tenant)[0], settle=True)
        ids = dict(zip(names, (r.id for r in refs), strict=True))
        s.execute(text("DELETE FROM waypoints"))
        links = [("hit", "x", 0.95), *((f"h{i}", "hit", 0.3) for i in range(4))]
        links += [(f"y{i}", "x", round(0.9 - 0.1 * i, 2)) for i in range(5)]
        insert = text(
            "INSERT INTO waypoints (src_id, dst_id, user_id, kind, weight) VALUES (:a, :b, :u, 'association', :w)"
        )
        for src, dst, weight in links:
            s.execute(insert, {"a": ids[src], "b": ids[dst], "u": tenant, "w": weight})
    return ids


def _reached(db, engine, tenant, star, *, fanout: int) -> set[str]:
    vector = engine.embedder.embed(["memory of the star"])[0]
    queries = {s: SectorVector(engine.embedder.model, vector) for s in SECTORS}
    with db.reading() as s:
        fetched = neighbours.fetch_with_links(s, tenant, [star["hit"]], queries, max_hops=2, fanout=fanout)
    names = {memory_id: name for name, memory_id in star.items()}
    return {names[i] for i in fetched.rows}


def test_the_second_hop_walks_each_memorys_strongest_links(db, engine, tenant, star):
    everything = _reached(db, engine, tenant, star, fanout=0)
    assert everything == set(star)
    # X's three strongest: the link back to the hit, y0 (0.9), y1 (0.8); the hit's own four are all read
    assert _reached(db, engine, tenant, star, fanout=3) == {"hit", "x", "h0", "h1", "h2", "h3", "y0", "y1"}
    assert _reached(db, engine, tenant, star, fanout=1) == {"hit", "x", "h0", "h1", "h2", "h3"}


def test_one_hop_reads_no_second_whatever_the_fanout(db, engine, tenant, star):
    vector = engine.embedder.embed(["memory of the star"])[0]
    queries = {s: SectorVector(engine.embedder.model, vector) for s in SECTORS}
    with db.reading() as s:
        fetched = neighbours.fetch_with_links(s, tenant, [star["hit"]], queries, max_hops=1, fanout=3)
    assert set(fetched.rows) == {star[n] for n in ("hit", "x", "h0", "h1", "h2", "h3")}
