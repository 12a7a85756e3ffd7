"""Anchors of the fresh tier (migrations 0021, 0022) on real PostgreSQL: trained by the merge cycle once a model's fresh
codes are crowded, every code assigned to its nearest anchor (those written before by the merge, those after by the
triggers), and a crowded tenant's queries reading only the codes of the anchors nearest the query, while a tenant
with fewer fresh vectors still has all of them compared; trained again, as a new generation, once the fresh tier has
drifted from them, a code filed under a replaced anchor still read and then filed again.

Anchors are store-wide, so these tests use stores of their own: `anchored`, crowded once, and `regenerated`,
crowded by one tenant, emptied, then crowded by another's texts of other words."""

from __future__ import annotations

import itertools
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
from shared.text import fact_key

pytestmark = pytest.mark.integration

TOPICS = ["harbour", "invoice", "violin", "glacier", "compiler", "orchard", "passport", "tide", "lantern", "quartz"]
OTHER_TOPICS = ["saffron", "turbine", "meadow", "ledger", "falcon", "copper", "sonnet", "canyon", "pixel", "walnut"]
CROWDED, SMALL = "crowded", "small"
FIRST, SECOND = "first", "second"


def texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.choice(TOPICS)} {rng.choice(TOPICS)} {rng.choice(TOPICS)} remark {seed}-{i}" for i in range(n)]


def other_texts(n: int, seed: int) -> list[str]:
    """`n` distinct texts of five of OTHER_TOPICS' words: none of `texts`' words (synthetic vectors far from theirs:
    filed under anchors trained on `texts`, a drift of ~0.8). One of each rotation: "a b c d e" and "b c d e a" are one
    fact to the write path (`shared.text.fact_key`), one memory."""
    chosen: dict[str, str] = {}
    for words in random.Random(seed).sample(list(itertools.product(OTHER_TOPICS, repeat=5)), 2 * n):
        content = " ".join(words)
        chosen.setdefault(fact_key(content), content)
        if len(chosen) == n:
            break
    return list(chosen.values())


def bulk(db, engine: MemoryEngine, tenant: str, contents: list[str]) -> None:
    for start in range(0, len(contents), 2000):
        with db.session(tenant) as s:
            part = contents[start : start + 2000]
            engine.store(s, engine.prepare([MemoryCreate(content=c) for c in part], tenant)[0], settle=False)


def codes(maintenance) -> dict[str, int]:
    """The store's fresh codes: how many, how many without an anchor, how many whose anchor is not the nearest to
    their vector (farther than the nearest by more than float rounding: a writer compares in float32 with numpy,
    the trigger with pgvector, and two anchors equally near may come out either way)."""
    with maintenance.session() as s:
        row = s.execute(
            text(
                """
                SELECT count(*) AS codes, count(*) FILTER (WHERE c.anchor IS NULL) AS unassigned,
                       count(*) FILTER (WHERE c.anchor IS NULL OR coalesce((
                           SELECT f.centroid <=> v.embedding FROM fresh_anchors f
                           WHERE f.model = c.model AND f.dim = c.dim AND f.anchor = c.anchor), 2) > 1e-5 + (
                           SELECT min(f.centroid <=> v.embedding) FROM fresh_anchors f
                           WHERE f.model = c.model AND f.dim = c.dim)) AS misplaced
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
    anchor existed (the codes as they were then: `before`); then two merge runs, and their log records."""
    app, maintenance, engine = new_store(make_store, settings, "anchors")
    bulk(app, engine, CROWDED, texts(anchors.CROWD + 500, seed=1))
    bulk(app, engine, SMALL, texts(150, seed=2))
    before = codes(maintenance)

    records = merge_runs(maintenance, engine, settings, runs=2)  # the second: trained already, nothing to do
    return app, maintenance, engine, before, records


def merge_runs(maintenance, engine: MemoryEngine, settings, *, runs: int) -> list[logging.LogRecord]:
    """`runs` merge runs, their time budget spent on anchoring alone (nothing merged); their log records."""
    cycle = MergeCycle(
        maintenance, engine, settings.model_copy(update={"merge_time_budget_seconds": 0.001}), embed_backlog=lambda: 0
    )
    logger, records = logging.getLogger("mnemoflow.worker"), Records()
    level = logger.level
    logger.addHandler(records)
    logger.setLevel(logging.INFO)
    try:
        for _ in range(runs):
            cycle.run()
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)
    return records.records


def new_store(make_store, settings, name: str):
    """A store of its own, the synthetic model's: its app and maintenance roles' databases, and an engine."""
    url, app = make_store(name)
    embedder = SyntheticEmbedder(dim=384)
    with schema_session(settings.model_copy(update={"database_url": url}), f"mnemoflow.tests.{name}") as s:
        ensure_store_model(s, embedder, min_dim=settings.min_vector_dim, max_dim=settings.max_vector_dim)
    _, maintenance = make_store(name, role=DbRole.MAINTENANCE)
    return app, maintenance, MemoryEngine(settings.model_copy(update={"database_url": url}), embedder)


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

    # written after the anchors: filed by the engine's writer; by the triggers when inserted by another statement
    # or changed in place
    bulk(app, engine, CROWDED, texts(40, seed=3))
    with maintenance.session() as s:
        s.execute(
            text(
                "UPDATE memory_vectors SET embedding = CAST(:v AS vector) WHERE user_id = :u AND NOT indexed "
                "AND memory_id IN (SELECT memory_id FROM memory_vectors WHERE user_id = :u LIMIT 5)"
            ),
            {"u": SMALL, "v": "[" + ",".join(["-0.5", "0.5"] * 192) + "]"},
        )
        inserted = s.execute(
            text(
                "INSERT INTO memory_vectors (memory_id, sector, user_id, dim, model, indexed, embedding) "
                "SELECT v.memory_id, 'reflective', v.user_id, v.dim, v.model, false, CAST(:w AS vector) "
                "FROM memory_vectors v WHERE v.user_id = :u AND NOT v.indexed AND v.sector <> 'reflective' "
                "AND NOT EXISTS (SELECT 1 FROM memory_vectors r WHERE r.memory_id = v.memory_id "
                "AND r.sector = 'reflective') LIMIT 5"
            ),
            {"u": SMALL, "w": "[" + ",".join(["0.5", "-0.5"] * 192) + "]"},  # a vector of their own: walked
        ).rowcount
    assert inserted == 5
    state = codes(maintenance)
    assert state["unassigned"] == 0 and state["misplaced"] == 0


def test_the_engine_files_its_own_codes_and_the_trigger_writes_none_again(anchored):
    """A writer of the engine files its fresh codes under the anchors it read (`copy_vectors`): given anchors
    numbered one apart from the store's (each centroid under its neighbour's number), its codes carry its numbers,
    not the trigger's nearest, and its statement inserted each code once and updated none."""
    app, _, engine, _, _ = anchored
    with app.session(SMALL) as s:
        current = anchors.filings(s)
        url = anchors.cache_database(s)
    ((key, filing),) = current.items()
    database = (url, *key)  # this store's entry of the process's cache (other tests' stores have theirs)
    version, _ = anchors._filings[database]
    shifted = anchors.Filing(np.roll(filing.numbers, 1), filing.centroids)
    anchors._filings[database] = (version, shifted)
    contents = [f"{w} shifted anchors remark {i}" for i, w in enumerate(TOPICS)]
    try:
        with app.session(SMALL) as s:
            prepared = engine.prepare([MemoryCreate(content=c) for c in contents], SMALL)[0]
            engine.store(s, prepared, settle=False)
            written = s.execute(
                text("SELECT n_tup_ins, n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = 'fresh_codes'")
            ).one()
            rows = s.execute(
                text(
                    "SELECT c.anchor, v.embedding FROM fresh_codes c JOIN memory_vectors v "
                    "ON v.sector = c.sector AND v.memory_id = c.memory_id JOIN memories m ON m.id = c.memory_id "
                    "WHERE m.content = ANY(:contents)"
                ),
                {"contents": contents},
            ).all()
    finally:
        anchors._filings.pop(database, None)
    vectors = np.array([r.embedding.to_numpy() for r in rows], dtype=np.float32)
    assert len(rows) >= len(contents)
    assert [r.anchor for r in rows] == shifted.nearest(vectors).tolist()
    assert [r.anchor for r in rows] != filing.nearest(vectors).tolist()
    assert (written.n_tup_ins, written.n_tup_upd) == (len(rows), 0)


def test_after_filing_a_crowd_of_codes_the_merge_vacuums_and_analyses_them(anchored):
    """The filing's old versions cleared and the statistics refreshed at once (the planner sees codes filed, not the
    "nothing filed" of before the training; no dead entry left for the first pass to read), by the merge itself:
    `last_vacuum` and `last_analyze` are set by a VACUUM and an ANALYZE run by hand, not by autovacuum."""
    _, maintenance, _, before, records = anchored
    tidied = [r.getMessage() for r in records if "vacuumed and analysed" in r.getMessage()]
    assert len(tidied) == 1 and f"after {before['codes']} were filed" in tidied[0]
    with maintenance.session() as s:
        done = s.execute(
            text(
                "SELECT last_vacuum IS NOT NULL AND last_analyze IS NOT NULL FROM pg_stat_user_tables "
                "WHERE relname = 'fresh_codes'"
            )
        ).scalar_one()
    assert done


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


def numbers(maintenance) -> tuple[int, int, int]:
    """The anchors' lowest and highest numbers, and how many."""
    with maintenance.session() as s:
        row = s.execute(text("SELECT min(anchor), max(anchor), count(*) FROM fresh_anchors")).one()
    return int(row[0]), int(row[1]), int(row[2])


@pytest.fixture(scope="module")
def regenerated(make_store, settings):
    """A store of its own: anchors trained on one tenant's burst, which is then erased; another tenant's burst of
    texts of other words filed under them by the triggers (the drift measured then: `drift`); then two merge runs
    and their log records."""
    app, maintenance, engine = new_store(make_store, settings, "anchor_generations")
    bulk(app, engine, FIRST, texts(anchors.CROWD + 200, seed=11))
    first_run = merge_runs(maintenance, engine, settings, runs=1)
    first_numbers = numbers(maintenance)
    with app.session(FIRST) as s:
        s.execute(text("DELETE FROM memories WHERE user_id = :u"), {"u": FIRST})
    bulk(app, engine, SECOND, other_texts(anchors.CROWD + 200, seed=12))
    with maintenance.session() as s:
        drift = anchors.drifted(s)
    records = merge_runs(maintenance, engine, settings, runs=2)
    # the store as those runs left it (a later test trains yet another generation)
    with maintenance.session() as s:
        shares = s.execute(text("SELECT sum(share) FROM fresh_anchors")).scalar_one()
        drift_after = anchors.drifted(s)
    after = {"numbers": numbers(maintenance), "codes": codes(maintenance), "shares": shares, "drift": drift_after}
    return app, maintenance, engine, first_run, first_numbers, drift, records, after


def test_a_drifted_fresh_tier_gets_a_new_generation_of_anchors(regenerated):
    """Trained on the first burst (numbers 0 to 127), the anchors file the second burst's codes unlike the first's
    sample: past DRIFT, one merge run trains them again, numbered 128 to 255, and files every code under its
    nearest; then the tier has not drifted from them, and the next run leaves them."""
    _, _, engine, first_run, first_numbers, drift, records, after = regenerated
    assert sum("anchors for" in r.getMessage() for r in first_run) == 1
    assert first_numbers == (0, anchors.ANCHORS - 1, anchors.ANCHORS)
    assert [(d.model, d.dim) for d in drift] == [(engine.embedder.model, 384)]
    assert drift[0].drift > anchors.DRIFT and drift[0].codes == anchors.CROWD + 200

    again = [r.getMessage() for r in records if "trained again" in r.getMessage()]
    assert len(again) == 1 and f"total variation {drift[0].drift:.2f}" in again[0]
    assert after["numbers"] == (anchors.ANCHORS, 2 * anchors.ANCHORS - 1, anchors.ANCHORS)
    assert after["codes"] == {"codes": anchors.CROWD + 200, "unassigned": 0, "misplaced": 0}
    assert after["shares"] == pytest.approx(1.0, abs=1e-3)
    assert after["drift"] == []


def test_a_code_filed_under_a_replaced_anchor_is_read_and_filed_again(regenerated):
    """A writer that saw the old generation files its code under an old number: queries read it like an unfiled one
    (it is found first), no new generation is trained while it waits, and the merge files it again."""
    app, maintenance, engine, *_ = regenerated
    with app.session(SECOND) as s:
        content = random.Random(13).choice(semantic_contents(s, SECOND))
        memory = own_id(s, SECOND, content)
    query = searched(engine, content)
    with maintenance.session() as s:
        s.execute(
            text("UPDATE fresh_codes SET anchor = 5 WHERE sector = 'semantic' AND memory_id = :id"), {"id": memory}
        )
        assert anchors.drifted(s, threshold=-1.0) == []  # any drift would do; a stale code holds it back
    with app.session(SECOND) as s:
        got = [i for i, _ in search.dense_candidates(s, SECOND, query, limit=32, where=MemoryFilter())]
    assert got[0] == memory
    with maintenance.session() as s:
        assert anchors.assign_waiting(s) == 1
        assert len(anchors.drifted(s, threshold=-1.0)) == 1
    assert codes(maintenance)["misplaced"] == 0


def test_a_write_that_saw_the_replaced_anchors_is_read_and_filed_again(regenerated):
    """The race itself: a tenant's write files its codes (the triggers, in its statement) while a retraining
    replaces the anchors, and commits after it. Its codes carry the replaced generation's numbers: every query
    still reads them (one is found first), and the merge files them again under the new generation."""
    app, maintenance, engine, *_ = regenerated
    contents = [f"{w} harbour quartz lantern late write {i}" for i, w in enumerate(OTHER_TOPICS[:5])]
    with app.session(SECOND) as writer:
        engine.store(writer, engine.prepare([MemoryCreate(content=c) for c in contents], SECOND)[0], settle=False)
        with maintenance.session() as s:  # a merge run retrains meanwhile, and commits first
            trained = anchors.train(s, engine.embedder.model, 384)
        assert trained is not None
    lo, hi = trained.first, trained.first + anchors.ANCHORS - 1
    assert numbers(maintenance) == (lo, hi, anchors.ANCHORS)
    with app.session(SECOND) as s:
        late = [own_id(s, SECOND, c) for c in contents]
    with maintenance.session() as s:
        filed = (
            s.execute(text("SELECT anchor FROM fresh_codes WHERE memory_id = ANY(CAST(:ids AS uuid[]))"), {"ids": late})
            .scalars()
            .all()
        )
    assert len(filed) == len(contents) and all(a is not None and not lo <= a <= hi for a in filed)

    query = searched(engine, contents[0])
    with app.session(SECOND) as s:
        got = [i for i, _ in search.dense_candidates(s, SECOND, query, limit=32, where=MemoryFilter())]
    assert got[0] == late[0]
    # the retraining itself left every other code unfiled: the merge files them all, the late ones included
    with maintenance.session() as s:
        while anchors.assign_waiting(s):
            pass
    assert codes(maintenance)["misplaced"] == 0
