"""Anchors of the fresh tier (migration 0021) on real PostgreSQL: trained by the merge cycle once a model's fresh codes
are crowded, every code assigned to its nearest anchor (those written before by the merge, those after by the
triggers), and a crowded tenant's queries reading only the codes of the anchors nearest the query, while a tenant
with fewer fresh vectors still has all of them compared.

Anchors are store-wide, so these tests share a store of their own (`anchored`), crowded once."""

from __future__ import annotations

import logging
import random

import numpy as np
import pytest
from sqlalchemy import text

from shared.api.memories import MemoryCreate
from shared.db import schema_session
from shared.embedding import SyntheticEmbedder
from shared.lifecycle.merge_cycle import MergeCycle
from shared.memory.engine import MemoryEngine
from shared.storage import anchors, search
from shared.storage.rows import MemoryFilter, SectorVector
from shared.storage.sector_models import ensure_store_model
from shared.tenancy import DbRole

pytestmark = pytest.mark.integration

TOPICS = ["harbour", "invoice", "violin", "glacier", "compiler", "orchard", "passport", "tide", "lantern", "quartz"]
CROWDED, SMALL = "crowded", "small"


def texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.choice(TOPICS)} {rng.choice(TOPICS)} {rng.choice(TOPICS)} remark {seed}-{i}" for i in range(n)]


def bulk(db, engine: MemoryEngine, tenant: str, contents: list[str]) -> None:
    for start in range(0, len(contents), 2000):
        with db.session(tenant) as s:
            part = contents[start : start + 2000]
            engine.store(s, engine.prepare([MemoryCreate(content=c) for c in part], tenant)[0], settle=False)


def codes(maintenance) -> dict[str, int]:
    """The store's fresh codes: how many, how many without an anchor, how many whose anchor is not the nearest to
    their vector."""
    with maintenance.session() as s:
        row = s.execute(
            text(
                """
                SELECT count(*) AS codes, count(*) FILTER (WHERE c.anchor IS NULL) AS unassigned,
                       count(*) FILTER (WHERE c.anchor IS DISTINCT FROM (
                           SELECT f.anchor FROM fresh_anchors f WHERE f.model = c.model AND f.dim = c.dim
                           ORDER BY f.centroid <=> v.embedding LIMIT 1)) AS misplaced
                FROM fresh_codes c JOIN memory_vectors v ON v.sector = c.sector AND v.memory_id = c.memory_id
                """
            )
        ).one()
    return dict(row._mapping)


class Records(logging.Handler):
    """The log records of a block, whatever the logger's level outside it."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def anchored(make_store, settings):
    """A store of its own: a tenant with more than `CROWD` fresh vectors and one with a few, stored before any
    anchor existed (the codes as they were then: `before`); then two merge runs (their time budget spent on
    anchoring alone: nothing merged), and their log records."""
    url, app = make_store("anchors")
    embedder = SyntheticEmbedder(dim=384)
    with schema_session(settings.model_copy(update={"database_url": url}), "mnemoflow.tests.anchors") as s:
        ensure_store_model(s, embedder, min_dim=settings.min_vector_dim, max_dim=settings.max_vector_dim)
    _, maintenance = make_store("anchors", role=DbRole.MAINTENANCE)
    engine = MemoryEngine(settings.model_copy(update={"database_url": url}), embedder)
    bulk(app, engine, CROWDED, texts(anchors.CROWD + 500, seed=1))
    bulk(app, engine, SMALL, texts(150, seed=2))
    before = codes(maintenance)

    cycle = MergeCycle(
        maintenance, engine, settings.model_copy(update={"merge_time_budget_seconds": 0.001}), embed_backlog=lambda: 0
    )
    logger, records = logging.getLogger("mnemoflow.worker"), Records()
    level = logger.level
    logger.addHandler(records)
    logger.setLevel(logging.INFO)
    try:
        cycle.run()
        cycle.run()  # trained already: nothing to do
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)
    return app, maintenance, engine, before, records.records


def test_before_training_no_code_has_an_anchor(anchored):
    before = anchored[3]
    assert before["codes"] > anchors.CROWD
    assert before["unassigned"] == before["codes"]


def test_the_merge_trains_anchors_once_and_assigns_every_code_to_its_nearest(anchored):
    app, maintenance, engine, _, records = anchored
    with maintenance.session() as s:
        made = s.execute(text("SELECT model, dim, count(*) AS n FROM fresh_anchors GROUP BY model, dim")).all()
    assert [(r.model, r.dim, r.n) for r in made] == [(engine.embedder.model, 384, anchors.ANCHORS)]
    assert sum("anchors for" in r.getMessage() for r in records) == 1
    state = codes(maintenance)
    assert state["unassigned"] == 0 and state["misplaced"] == 0 and state["codes"] > anchors.CROWD

    # written after the anchors: assigned by the triggers, inserted and changed in place alike
    bulk(app, engine, CROWDED, texts(40, seed=3))
    with maintenance.session() as s:
        s.execute(
            text(
                "UPDATE memory_vectors SET embedding = CAST(:v AS vector) WHERE user_id = :u AND NOT indexed "
                "AND memory_id IN (SELECT memory_id FROM memory_vectors WHERE user_id = :u LIMIT 5)"
            ),
            {"u": SMALL, "v": "[" + ",".join(["-0.5", "0.5"] * 192) + "]"},
        )
    state = codes(maintenance)
    assert state["unassigned"] == 0 and state["misplaced"] == 0


def own_id(session, tenant: str, content: str):
    return session.execute(
        text("SELECT id FROM memories WHERE user_id = :u AND content = :c"), {"u": tenant, "c": content}
    ).scalar_one()


def searched(engine: MemoryEngine, content: str) -> dict[str, SectorVector]:
    vector = np.asarray(engine.embedder.embed([content])[0], dtype=np.float32)
    return {"semantic": SectorVector(engine.embedder.model, vector)}


def literal(query: dict[str, SectorVector]) -> str:
    """The query's semantic vector as pgvector's text."""
    return "[" + ",".join(map(str, query["semantic"].vector.tolist())) + "]"


def exact_nearest(session, tenant: str, query: dict[str, SectorVector]) -> list[tuple]:
    """The tenant's 32 fresh semantic vectors nearest the query, compared one by one: (memory id, similarity)."""
    return [
        (r.memory_id, r.sim)
        for r in session.execute(
            text(
                "SELECT memory_id, 1 - (embedding::vector(384) <=> CAST(:q AS vector(384))) AS sim "
                "FROM memory_vectors WHERE sector = 'semantic' AND user_id = :u AND NOT indexed "
                "ORDER BY embedding::vector(384) <=> CAST(:q AS vector(384)) LIMIT 32"
            ),
            {"u": tenant, "q": literal(query)},
        )
    ]


def semantic_contents(session, tenant: str) -> list[str]:
    return sorted(
        session.execute(
            text(
                "SELECT m.content FROM memories m JOIN memory_vectors v ON v.memory_id = m.id "
                "WHERE m.user_id = :u AND v.sector = 'semantic' AND NOT v.indexed"
            ),
            {"u": tenant},
        ).scalars()
    )


def test_a_crowded_tenant_reads_only_its_nearest_anchors_codes(anchored):
    """Its own text is found first (its code's anchor is among the query's nearest), and most of the exact nearest
    too; moved to an anchor far from the query, a code is no longer read, and without an anchor it is again."""
    app, maintenance, engine, _, _ = anchored
    overlaps = []
    with app.session(CROWDED) as s:
        asked = random.Random(5).sample(semantic_contents(s, CROWDED), 15)
        for content in asked:
            query = searched(engine, content)
            got = [i for i, _ in search.dense_candidates(s, CROWDED, query, limit=32, where=MemoryFilter())]
            assert got[0] == own_id(s, CROWDED, content)
            exact = [i for i, _ in exact_nearest(s, CROWDED, query)]
            overlaps.append(len(set(got) & set(exact)) / len(exact))
    assert sum(overlaps) / len(overlaps) >= 0.8, overlaps

    content = asked[0]
    query = searched(engine, content)
    with app.session(CROWDED) as s:
        memory = own_id(s, CROWDED, content)
    with maintenance.session() as s:
        farthest = s.execute(
            text("SELECT anchor FROM fresh_anchors ORDER BY centroid <=> CAST(:q AS vector) DESC LIMIT 1"),
            {"q": literal(query)},
        ).scalar_one()
        s.execute(
            text("UPDATE fresh_codes SET anchor = :a WHERE sector = 'semantic' AND memory_id = :id"),
            {"a": farthest, "id": memory},
        )
    with app.session(CROWDED) as s:
        got = [i for i, _ in search.dense_candidates(s, CROWDED, query, limit=32, where=MemoryFilter())]
    assert memory not in got
    with maintenance.session() as s:
        s.execute(
            text("UPDATE fresh_codes SET anchor = NULL WHERE sector = 'semantic' AND memory_id = :id"), {"id": memory}
        )
    with app.session(CROWDED) as s:
        got = [i for i, _ in search.dense_candidates(s, CROWDED, query, limit=32, where=MemoryFilter())]
    assert got[0] == memory


def test_a_tenant_with_few_fresh_vectors_has_all_of_them_compared(anchored):
    """Anchors exist, but below CROWD every code is read: below the shortlist the search is exact. Compared by
    similarity, since texts of the same words tie."""
    app, _, engine, _, _ = anchored
    with app.session(SMALL) as s:
        for content in random.Random(6).sample(semantic_contents(s, SMALL), 10):
            query = searched(engine, content)
            got = [sim for _, sim in search.dense_candidates(s, SMALL, query, limit=32, where=MemoryFilter())]
            exact = [sim for _, sim in exact_nearest(s, SMALL, query)]
            assert sorted(got, reverse=True) == pytest.approx(exact, abs=1e-6)
