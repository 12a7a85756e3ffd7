"""The read path's one statement (`storage.candidates`) against the stages it folds together, run apart."""

from __future__ import annotations

import random

import pytest
from sqlalchemy import text

from shared.api.memories import MemoryCreate
from shared.memory.sectors import SECTORS
from shared.retrieval.fusion import fuse
from shared.storage import bm25, search, selected
from shared.storage.candidates import fused_with_links, prelude
from shared.storage.rows import MemoryFilter, SectorVector

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
        for src, dst, kind in [(ids[0], ids[1], "next"), (ids[1], ids[2], "next"), (ids[3], ids[64], "contradicts")]:
            s.execute(
                text("INSERT INTO waypoints (src_id, dst_id, user_id, kind, weight) VALUES (:a, :b, :u, :k, 0.8)"),
                {"a": src, "b": dst, "u": tenant, "k": kind},
            )
    return texts


def apart(session, tenant, queries, searched, query, *, where, lexical_on, max_hops, settings, limit=32):
    """The stages as they run on their own: full text, the vector search, RRF in Python, then the fetch."""
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
    fetched = search.fetch_with_links(
        session,
        tenant,
        list(hits),
        queries,
        known_cosine=[i for i, c in hits.items() if c.dense_similarity is not None],
        max_hops=max_hops,
        ladder=ladder,
    )
    return hits, max((s for _, s in lexical), default=0.0), fetched


@pytest.mark.parametrize(
    ("query", "where", "lexical_on", "dense_on", "max_hops"),
    [
        ("Bob planned the roof repair", MemoryFilter(), True, True, 2),
        ("a trip to Lisbon next week", MemoryFilter(), True, True, 1),
        ("green tea", MemoryFilter(tags=["home"]), True, True, 2),
        ("the security audit", MemoryFilter(sectors=["semantic", "episodic"]), True, True, 2),
        ("Dr. Chen forgot piano", MemoryFilter(), False, True, 2),
        ("Dr. Chen forgot piano", MemoryFilter(), True, False, 2),
        ("zebra quantum", MemoryFilter(), True, True, 2),  # no word of the store
    ],
)
def test_the_one_statement_reads_what_the_stages_read_apart(
    db, engine, tenant, store, settings, query, where, lexical_on, dense_on, max_hops
):
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
        )
        smaller = search.smaller_rungs(searched, ladder) if searched else []
        terms, present = prelude(s, tenant, query, settings.lexical.config, list(searched), smaller)
        assert [t[:4] for t in terms] == [tuple(t) for t in bm25.term_stats(s, tenant, query, settings.lexical)]
        assert present == search.compressed_rungs(s, tenant, list(searched), smaller)
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
        )
        payloads = selected.fetch_payloads(s, tenant, [h["id"] for h in together.hits])
    expected = [
        (c.id, c.lexical_rank, c.lexical_score, c.dense_rank, c.dense_similarity, c.rrf_score) for c in hits.values()
    ]
    got = [
        (h["id"], h["lexical_rank"], h["lexical_score"], h["dense_rank"], h["dense_similarity"], h["rrf_score"])
        for h in together.hits
    ]
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
    if query == "Bob planned the roof repair":
        assert fetched.links and len(fetched.rows) > len(expected)  # memories reached through the links too
