"""The read path's one statement (`storage.candidates`) against the stages it folds together, run apart."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from shared.api.memories import MemoryCreate
from shared.api.query import QueryFilters
from shared.db import read_rows
from shared.embedding.synthetic import SyntheticEmbedder
from shared.memory.engine import MemoryEngine
from shared.memory.sectors import SECTORS
from shared.retrieval.fusion import Candidate, fuse
from shared.retrieval.service import Retriever
from shared.storage import bm25, neighbours, search, selected
from shared.storage.candidates import fused_with_links, prelude
from shared.storage.rows import MemoryFilter, SectorVector
from tests.integration.helpers import search as search_as_user

pytestmark = pytest.mark.integration

WHO = ["Alice", "Bob", "the team", "Dr. Chen", "the landlord", "my sister"]
DID = ["mentioned", "planned", "postponed", "reviewed", "forgot", "celebrated"]
WHAT = [
    "the quarterly budget",
    "a trip to Lisbon",
    "the roof repair",
    "green tea",
    "the security audit",
    "piano lessons",
]
MAY = (datetime(2023, 5, 1, tzinfo=UTC), datetime(2023, 6, 1, tzinfo=UTC))
WHEN = ["on Monday", "next week", "after lunch", "by email", "before the deadline", "with some doubts"]


def corpus(n: int) -> list[str]:
    rng = random.Random(5)
    return [f"{rng.choice(WHO)} {rng.choice(DID)} {rng.choice(WHAT)} {rng.choice(WHEN)} (note {i})" for i in range(n)]


@pytest.fixture
def store(db, maintenance, engine, tenant):
    """A tenant's 90 memories: 60 merged into HNSW and linked, 30 in the fresh tier; some reading order and a
    contradiction among them; a few tagged, a few in the hot tier."""
    texts = corpus(90)
    items = [MemoryCreate(content=t, tags=["home"] if i % 7 == 0 else []) for i, t in enumerate(texts)]
    with db.session() as s:
        engine.store(s, engine.prepare(items[:60], tenant)[0], settle=False)
    with maintenance.session() as s:
        while engine.merge_fresh(s, limit=5000)[0]:
            pass
    with db.session() as s:
        engine.store(s, engine.prepare(items[60:], tenant)[0], settle=False)
        ids = [r.id for r in s.execute(text("SELECT id FROM memories ORDER BY created_at, id")).all()]
        s.execute(text("UPDATE memories SET tier = 'hot' WHERE id = ANY(:ids)"), {"ids": ids[::5]})
        # a few happened in May 2023, settled and fresh (a period's search finds them whatever their words): every
        # ninth text, so two of them are tagged (the 0th and 63rd) whatever order the rows' ids fall in
        may = text("UPDATE memories SET occurred_at = :may WHERE content = ANY(:texts)")
        assert s.execute(may, {"may": MAY[0], "texts": texts[::9]}).rowcount == 10
        for src, dst, kind in [(ids[0], ids[1], "next"), (ids[1], ids[2], "next"), (ids[3], ids[64], "contradicts")]:
            s.execute(
                text("INSERT INTO waypoints (src_id, dst_id, user_id, kind, weight) VALUES (:a, :b, :u, :k, 0.8)"),
                {"a": src, "b": dst, "u": tenant, "k": kind},
            )
    return texts


def apart(
    session, tenant, queries, searched, query, *, where, lexical_on, max_hops, settings, period, limit=32, fanout=0
):
    """The stages as they run on their own: full text, the vector search, RRF in Python, the search of the period
    (its finds added after the fused hits, with their rank there), then the fetch."""
    p = settings.retrieval
    ladder = settings.compression.ladder
    lexical = (
        bm25.lexical_candidates(session, tenant, query, limit=limit, where=where, params=settings.lexical)
        if lexical_on
        else []
    )
    dense = (
        search.dense_candidates(session, tenant, searched, limit=limit, where=where, ladder=ladder) if searched else []
    )
    dense = [(i, sim) for i, sim in dense if sim >= p.dense_min_similarity]
    hits = fuse(lexical, dense, rrf_k=p.rrf_k, limit=limit)
    if period:  # the period's statement on its own
        statement, params = search.period_plan(
            searched,
            start=period[0],
            end=period[1],
            where=where,
            limit=limit,
            scan_limit=p.period_scan_limit,
            ladder=ladder,
        )
        anchored = read_rows(session, statement, params | {"user_id": tenant})
        for rank, row in enumerate(anchored, start=1):
            hits.setdefault(row.id, Candidate(row.id, dense_similarity=float(row.sim))).period_rank = rank
    fetched = neighbours.fetch_with_links(
        session,
        tenant,
        list(hits),
        queries,
        known_cosine=[i for i, c in hits.items() if c.dense_similarity is not None],
        max_hops=max_hops,
        fanout=fanout,
        ladder=ladder,
    )
    return hits, max((s for _, s in lexical), default=0.0), fetched


@pytest.mark.parametrize(
    ("query", "where", "lexical_on", "dense_on", "max_hops", "period"),
    [
        ("Bob planned the roof repair", MemoryFilter(), True, True, 2, None),
        ("a trip to Lisbon next week", MemoryFilter(), True, True, 1, None),
        ("green tea", MemoryFilter(tags=["home"]), True, True, 2, None),
        ("the security audit", MemoryFilter(sectors=["semantic", "episodic"]), True, True, 2, None),
        ("Dr. Chen forgot piano", MemoryFilter(), False, True, 2, None),
        ("Dr. Chen forgot piano", MemoryFilter(), True, False, 2, None),
        ("zebra quantum", MemoryFilter(), True, True, 2, None),  # no word of the store
        ("what did Bob plan in May 2023", MemoryFilter(), True, True, 2, MAY),
        ("green tea in May 2023", MemoryFilter(tags=["home"]), True, True, 2, MAY),
        ("the security audit in May 2023", MemoryFilter(sectors=["semantic", "episodic"]), True, True, 1, MAY),
        ("zebra quantum this year", MemoryFilter(), True, True, 2, "now"),  # no word of the store; all in the period
    ],
)
@pytest.mark.parametrize("fanout", [0, 1])
def test_the_one_statement_reads_what_the_stages_read_apart(
    db, engine, tenant, store, settings, query, where, lexical_on, dense_on, max_hops, period, fanout
):
    if period == "now":  # every memory not moved to May 2023
        year = datetime.now(UTC).year
        period = (datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC))
    vector = engine.embedder.embed([query])[0]
    queries = {s: SectorVector(engine.embedder.model, vector) for s in SECTORS}
    # the filter's sectors are the ones searched (the read path's rule); the rows' cosines use every sector's query
    searched = ({s: queries[s] for s in where.sectors} if where.sectors else queries) if dense_on else {}
    ladder = settings.compression.ladder
    with db.reading() as s:
        hits, max_lexical, fetched = apart(
            s,
            tenant,
            queries,
            searched,
            query,
            where=where,
            lexical_on=lexical_on,
            max_hops=max_hops,
            settings=settings,
            period=period,
            fanout=fanout,
        )
        smaller = search.smaller_rungs(searched, ladder) if searched else []
        terms, present, _ = prelude(s, tenant, query, settings.lexical.config, smaller)
        assert [t[:4] for t in terms] == [tuple(t) for t in bm25.term_stats(s, tenant, query, settings.lexical)]
        assert present == search.compressed_rungs(s, tenant, smaller)
        together = fused_with_links(
            s,
            tenant,
            queries,
            searched,
            bm25.lexical_plan(terms, tenant, limit=32, where=where, params=settings.lexical) if lexical_on else None,
            limit=32,
            where=where,
            present=present,
            dense_min_similarity=settings.retrieval.dense_min_similarity,
            rrf_k=settings.retrieval.rrf_k,
            max_hops=max_hops,
            ladder=ladder,
            fanout=fanout,
            period=search.period_plan(
                searched,
                start=period[0],
                end=period[1],
                where=where,
                limit=32,
                scan_limit=settings.retrieval.period_scan_limit,
                ladder=ladder,
            )
            if period
            else None,
        )
        payloads = selected.fetch_payloads(s, tenant, [h["id"] for h in together.hits])
    columns = ("lexical_rank", "lexical_score", "dense_rank", "dense_similarity", "rrf_score", "period_rank")
    expected = [(c.id, *(getattr(c, name) for name in columns)) for c in hits.values()]
    got = [(h["id"], *(h[name] for name in columns)) for h in together.hits]
    assert got == expected  # the same hits in the same order, with exactly the same ranks and scores
    assert together.max_lexical == max_lexical
    hit_ids = {h["id"] for h in together.hits}
    for memory_id, row in together.fetched.rows.items():  # hits come with their payload, unless the cache keeps it
        carried = {name: row.pop(name) for name in ("content", "summary", "metadata", "document_id") if name in row}
        if memory_id in hit_ids and row["tier"] != "hot":
            assert carried == {name: payloads[memory_id][name] for name in carried} and len(carried) == 4
        else:
            assert not carried
    assert together.fetched.rows == fetched.rows
    for mine, theirs in zip(together.fetched[1:], fetched[1:], strict=True):  # links, reading order, contradicts
        assert sorted(mine, key=str) == sorted(theirs, key=str)
    if query != "zebra quantum":
        assert expected, "the query should find something"
    if period:  # the period's search found some, and (unfiltered, more than the rankers keep) some they did not
        assert any(c.period_rank for c in hits.values())
        assert where.active or any(c.period_rank and not c.rrf_score for c in hits.values())
    if query == "Bob planned the roof repair":
        assert fetched.links and len(fetched.rows) > len(expected)  # memories reached through the links too


class Renamed(SyntheticEmbedder):
    model = "synthetic-hash-v1-renamed"  # another model as far as the store goes, and another dimension below


def test_a_sector_of_its_own_model_asked_alone_is_searched_with_its_own_query(make_store, settings):
    """The statement's searched sectors and its rows' cosines group the query by model apart: asked for only the
    sector of the second model, the vector search is that model's (their parameters once shared names)."""
    _, db = make_store("candidates_two_models")
    base, other = SyntheticEmbedder(dim=384), Renamed(dim=128)
    advanced = settings.model_copy(update={"embed_mode": "advanced"})
    embedders = {sector: other if sector == "reflective" else base for sector in SECTORS}
    engine = MemoryEngine(advanced, base, sector_embedders=embedders)
    with db.session("rae") as s:
        memory, _ = engine.add(s, "rae", MemoryCreate(content="Looking back, I realized I learned to slow down"))
    assert "reflective" in memory["sectors"]
    with db.reading("rae") as s:
        outcome = search_as_user(
            Retriever(advanced, engine.embedders),
            s,
            "rae",
            "looking back I realized",
            filters=QueryFilters(sectors=["reflective"], min_score=0),
        )
    found = {c.id: c for c, _ in outcome.matches}
    assert found[memory["id"]].dense_rank == 1 and found[memory["id"]].dense_similarity > 0.3
