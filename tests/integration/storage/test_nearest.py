"""A tenant's indexed vectors searched through `mnemoflow_nearest` (migration 0017) on a store of its own: planned for
the tenant on each call, a small tenant beside a large one reads its own rows instead of walking the shared HNSW
index, whatever plan the store's statistics would give the prepared statement; the rows are the exact nearest, and
row-level security holds inside the function. The same for full text through `mnemoflow_matching` (migration 0018).
And the fresh tier's first pass on the plan such a statement keeps: the vectors it shortlists read by key. Beside a
tenant's bulk import (migration 0019): the others' first pass planned for them (`mnemoflow_fresh`), the importer's
settled search not walking the shared index, its words counted as stored (migration 0020)."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from datetime import UTC, datetime

import numpy as np
import pytest
from pgvector import Vector
from sqlalchemy import text

from infra.embedded import recreate_database
from infra.migrate import upgrade
from shared.api.memories import MemoryCreate
from shared.db import Database, create_db_engine, read_rows
from shared.embedding.synthetic import SyntheticEmbedder
from shared.memory.engine import MemoryEngine
from shared.memory.sectors import SECTORS
from shared.retrieval.lexical import LexicalParams
from shared.storage import bm25, search
from shared.storage.rows import FILTER_PARAMS, MemoryFilter, SectorVector
from shared.storage.vector_index import vector_index_names
from shared.tenancy import DbRole

pytestmark = pytest.mark.integration

LARGE, SMALL, BURST, IMPORTER = "large", "small", "burst", "importer"
WORDS = ["harbour", "invoice", "violin", "glacier", "compiler", "orchard", "passport", "tide", "lantern", "quartz"]
SECTOR = "semantic"
HAPPENED = {True: datetime(2023, 5, 1, tzinfo=UTC), False: datetime(2024, 5, 1, tzinfo=UTC)}


def texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(4)) + f" fact {seed}-{i}" for i in range(n)]


@pytest.fixture(scope="module")
def store(servers, settings) -> Iterator[dict]:
    """A store of two tenants, 2,000 memories and 20, every vector merged into the index and the statistics fresh."""
    url = recreate_database(servers["admin_url"], "mnemoflow_test_nearest")
    upgrade(url)
    own = settings.model_copy(update={"database_url": url})
    engine = MemoryEngine(own, SyntheticEmbedder(dim=384))
    app = Database(create_db_engine(own, "mnemoflow.tests.nearest", pool_size=2))
    maintenance = Database(create_db_engine(own, "mnemoflow.tests.nearest.m", pool_size=2, role=DbRole.MAINTENANCE))
    owner = Database(create_db_engine(own, "mnemoflow.tests.nearest.o", pool_size=1, role=DbRole.OWNER))
    for tenant, n in ((LARGE, 2_000), (SMALL, 20)):
        items = [  # every third memory tagged, and happened in 2023 (the rest in 2024)
            MemoryCreate(content=c, tags=["third"] if i % 3 == 0 else [], occurred_at=HAPPENED[i % 3 == 0])
            for i, c in enumerate(texts(n, seed=n))
        ]
        with app.session(tenant) as s:
            engine.store(s, engine.prepare(items, tenant)[0], settle=False)
    with maintenance.session() as s:
        while engine.merge_fresh(s, limit=1_000)[0]:
            pass
    with owner.session() as s:
        s.execute(text("ANALYZE memory_vectors"))
    try:
        yield {"engine": engine, "app": app, "owner": owner}
    finally:
        for database in (app, maintenance, owner):
            database.dispose()


def index_scans(owner: Database) -> dict[str, int]:
    """Scans so far of the HNSW indexes (`hnsw` the one graph for every sector, `hnsw_<sector>` each sector's) and of
    the (user_id, dim) and (user_id, sector, dim) indexes."""
    with owner.session() as s:
        s.execute(text("SELECT pg_stat_clear_snapshot()"))
        rows = s.execute(
            text("SELECT indexrelname, idx_scan FROM pg_stat_user_indexes WHERE indexrelname = ANY(:names)"),
            {"names": [*vector_index_names(384), "memory_vectors_user_dim", "memory_vectors_user_sector"]},
        ).all()
    return {name.removeprefix("memory_vectors_").replace("_384", ""): int(n) for name, n in rows}


def search_as(store: dict, tenant: str, content: str, times: int = 8, where: MemoryFilter | None = None) -> list:
    """The tenant's dense candidates in every sector for `content` (one walk), asked `times` times on one connection, on
    the plan the server keeps for a prepared statement once it decides a generic one costs no more than planning
    (psycopg prepares a statement on its fifth run; which tenant's queries come first decides when, so here it is
    forced: `plan_cache_mode`); the connection's statistics sent before it is returned."""
    engine = store["engine"]
    vector = np.asarray(engine.embedder.embed([content])[0], dtype=np.float32)
    searched = dict.fromkeys(SECTORS, SectorVector(engine.embedder.model, vector))
    with store["app"].reading(tenant) as s:
        s.execute(text("SET plan_cache_mode = force_generic_plan"))
        try:
            for _ in range(times):
                found = search.dense_candidates(s, tenant, searched, limit=16, where=where or MemoryFilter())
        finally:
            s.execute(text("RESET plan_cache_mode"))
        send_statistics(s)
    return found


def send_statistics(s) -> None:
    """Have this connection's statistics sent to the server's counters when it goes idle (PostgreSQL sends them at
    most once a second otherwise, so they could wait in the pooled connection and be sent by its next user, between
    a test's two readings of the counters)."""
    s.execute(text("SELECT pg_stat_force_next_flush()"))
    s.execute(text("SELECT 1"))


def exact(store: dict, tenant: str, content: str, limit: int = 16, tagged: bool = False, sector: str = "") -> list:
    """The tenant's indexed vectors nearest `content` (each walked once), compared one by one (`tagged`: of tagged
    memories)."""
    engine = store["engine"]
    vector = "[" + ",".join(map(str, engine.embedder.embed([content])[0])) + "]"
    with store["owner"].session() as s:
        return list(
            s.execute(
                text(
                    "SELECT v.memory_id FROM memory_vectors v JOIN memories m ON m.id = v.memory_id "
                    "WHERE (v.sector = :sector OR :sector = '' AND v.walked) AND v.user_id = :u AND v.indexed "
                    "AND (NOT :tagged OR 'third' = ANY(m.tags)) "
                    "ORDER BY v.embedding::vector(384) <=> CAST(:q AS vector(384)), v.memory_id LIMIT :k"
                ),
                {"u": tenant, "q": vector, "k": limit, "tagged": tagged, "sector": sector},
            ).scalars()
        )


def test_a_small_tenant_beside_a_large_one_reads_its_own_rows_and_finds_the_exact_nearest(store):
    asked = texts(20, seed=20)[3]
    before = index_scans(store["owner"])
    found = search_as(store, SMALL, asked)
    after = index_scans(store["owner"])
    # every one of its 20 memories with a semantic vector, nearest first, as an exact comparison orders them
    assert [memory_id for memory_id, _ in found] == exact(store, SMALL, asked)[: len(found)] and found
    assert after["user_dim"] > before["user_dim"]  # its own rows, read through the (user_id, dim) index ...
    assert after["hnsw"] == before["hnsw"]  # ... not a walk of the large tenant's graph


def test_the_large_tenant_walks_the_index_on_a_store_whose_statistics_say_many_small_tenants(store):
    """On the statistics of a store of a thousand tenants a plan made for no tenant in particular reads every row of
    whoever asks; planned for the large tenant (a most common value of `user_id`), the search walks the index and
    finds its nearest."""
    owner = store["owner"]
    partition = "memory_vectors"
    asked = texts(2_000, seed=2_000)[17]
    with owner.session() as s:
        s.execute(text(f"ALTER TABLE {partition} ALTER COLUMN user_id SET (n_distinct = 1000)"))
        s.execute(text(f"ANALYZE {partition}"))
    try:
        before = index_scans(owner)
        found = search_as(store, LARGE, asked)
        after = index_scans(owner)
    finally:
        with owner.session() as s:
            s.execute(text(f"ALTER TABLE {partition} ALTER COLUMN user_id RESET (n_distinct)"))
            s.execute(text(f"ANALYZE {partition}"))
    assert after["hnsw"] > before["hnsw"] and after["user_dim"] == before["user_dim"]  # the index, not every row
    own = exact(store, LARGE, asked)
    assert found[0][0] == own[0]  # its own text, first
    assert len({memory_id for memory_id, _ in found} & set(own)) >= 0.8 * len(own)


def test_a_filtered_search_is_planned_for_the_tenant_too_and_keeps_to_the_filter(store):
    """Every filter of `MemoryFilter` at once goes into the function's statement with its values: the small tenant's
    tagged memories of 2023, still found among its own rows."""
    where = MemoryFilter(
        sectors=[SECTOR],
        tags=["third"],
        start_time=datetime(2020, 1, 1, tzinfo=UTC),
        end_time=datetime(2100, 1, 1, tzinfo=UTC),
        occurred_after=datetime(2023, 1, 1, tzinfo=UTC),
        occurred_before=datetime(2023, 12, 31, tzinfo=UTC),
    )
    assert set(where.sql("m")[1]) == set(FILTER_PARAMS)  # every parameter a filter has
    asked = texts(20, seed=20)[4]
    before = index_scans(store["owner"])
    found = search_as(store, SMALL, asked, where=where)
    after = index_scans(store["owner"])
    assert [memory_id for memory_id, _ in found] == exact(store, SMALL, asked, tagged=True)[: len(found)]
    assert len(found) == 7  # memories 0, 3, ..., 18 of the 20
    assert after["hnsw"] == before["hnsw"]  # its own rows (by whichever index suits the filter), not the graph


def test_a_search_of_one_sector_walks_that_sectors_graph_not_the_one_graph(store):
    """Searched in one sector (`filters.sector`, LangGraph's routes), the large tenant's 2,000 rows of it are walked
    through the sector's own graph (migration 0031), not the one graph with a filter (which reads on until it has
    met enough of the sector), and its nearest are found."""
    asked = texts(2_000, seed=2_000)[41]
    before = index_scans(store["owner"])
    found = search_as(store, LARGE, asked, where=MemoryFilter(sectors=[SECTOR]))
    after = index_scans(store["owner"])
    assert after[f"hnsw_{SECTOR}"] > before[f"hnsw_{SECTOR}"]
    assert after["hnsw"] == before["hnsw"]
    own = exact(store, LARGE, asked, sector=SECTOR)
    assert found[0][0] == own[0]  # its own text, first
    assert len({memory_id for memory_id, _ in found} & set(own)) >= 0.8 * len(own)


def test_a_search_of_several_sectors_returns_each_memory_once_best_first(store):
    """Several sectors searched (one named twice): a walk per sector, a memory found by two walks once, as many as
    asked, best first."""
    asked = texts(2_000, seed=2_000)[41]
    engine = store["engine"]
    vector = np.asarray(engine.embedder.embed([asked])[0], dtype=np.float32)
    with store["app"].reading(LARGE) as s:
        rows = s.execute(
            text(
                "SELECT memory_id, sim FROM mnemoflow_nearest(384, :u, :model, CAST(:q AS vector(384)), 16, "
                "p_within => CAST(:within AS text[]))"
            ),
            {"u": LARGE, "model": engine.embedder.model, "q": Vector(vector), "within": [SECTOR, SECTOR, "emotional"]},
        ).all()
    ids = [r.memory_id for r in rows]
    assert len(ids) == len(set(ids)) == 16
    assert [r.sim for r in rows] == sorted((r.sim for r in rows), reverse=True)
    assert ids[0] == exact(store, LARGE, asked, sector=SECTOR)[0]


def test_the_function_shows_a_tenant_no_row_of_another(store):
    """Asked for another tenant's rows, the function returns none: its statement runs under the caller's row-level
    security (SECURITY INVOKER)."""
    engine = store["engine"]
    vector = "[" + ",".join(map(str, engine.embedder.embed(["harbour invoice violin glacier"])[0])) + "]"
    with store["app"].reading(SMALL) as s:
        rows = s.execute(
            text("SELECT * FROM mnemoflow_nearest(384, :u, :m, CAST(:q AS vector(384)), 50)"),
            {"u": LARGE, "m": engine.embedder.model, "q": vector},
        ).all()
        own = s.execute(
            text("SELECT * FROM mnemoflow_nearest(384, :u, :m, CAST(:q AS vector(384)), 50)"),
            {"u": SMALL, "m": engine.embedder.model, "q": vector},
        ).all()
    assert rows == [] and own


def fresh_index_scans(owner: Database) -> dict[str, int]:
    """Scans so far of the vector table's partial index of fresh rows and of its key's (the primary key)."""
    with owner.session() as s:
        s.execute(text("SELECT pg_stat_clear_snapshot()"))
        rows = s.execute(
            text("SELECT indexrelname, idx_scan FROM pg_stat_user_indexes WHERE indexrelname = ANY(:names)"),
            {"names": ["memory_vectors_fresh", "memory_vectors_pkey"]},
        ).all()
    scans = {"fresh": 0, "key": 0}
    for name, n in rows:
        scans["fresh" if name.endswith("_fresh") else "key"] += int(n)
    return scans


def test_fresh_vectors_are_read_by_key_on_a_plan_made_when_nothing_was_fresh(store):
    """The statistics say no vector is fresh (every one merged, then analysed) when a burst lands: the kept plan
    still reads each shortlisted fresh vector by its key, instead of scanning the tenant's fresh rows once for each
    of them (4 to 8 s a query at 100,000 fresh vectors), and finds a memory's own text first."""
    owner, engine = store["owner"], store["engine"]
    partition = "memory_vectors"
    contents = texts(600, seed=600)  # more than the shortlist: FRESH_SHORTLIST of them read by key
    with owner.session() as s:  # the statistics stay as they were: no analyse while the test runs
        s.execute(text(f"ALTER TABLE {partition} SET (autovacuum_enabled = false)"))
    try:
        with store["app"].session(BURST) as s:
            engine.store(s, engine.prepare([MemoryCreate(content=c) for c in contents], BURST)[0], settle=False)
            send_statistics(s)  # its scans counted before `before`
        before = fresh_index_scans(owner)
        asked = contents[123]
        found = search_as(store, BURST, asked)
        after = fresh_index_scans(owner)
    finally:
        with owner.session() as s:
            s.execute(text(f"ALTER TABLE {partition} RESET (autovacuum_enabled)"))
    with store["owner"].session() as s:
        own = s.execute(
            text("SELECT id FROM memories WHERE user_id = :u AND content = :c"), {"u": BURST, "c": asked}
        ).scalar_one()
    assert found[0][0] == own
    assert after["fresh"] == before["fresh"]  # never the fresh rows' index ...
    assert after["key"] > before["key"]  # ... but each vector's key


def tenant_index_scans(owner: Database) -> int:
    """Scans so far of `memories`' indexes that begin with the tenant, summed."""
    with owner.session() as s:
        s.execute(text("SELECT pg_stat_clear_snapshot()"))
        rows = s.execute(
            text(
                "SELECT i.indexrelname, i.idx_scan, a.attname FROM pg_stat_user_indexes i "
                "JOIN pg_index x ON x.indexrelid = i.indexrelid "
                "JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = x.indkey[0] "
                "WHERE i.relname = 'memories'"
            )
        ).all()
    return sum(int(n) for _, n, column in rows if column == "user_id")


def test_the_large_tenants_full_text_match_skips_its_whole_index_on_many_tenant_statistics(store):
    """On the statistics of a store of a thousand tenants, a plan made for no tenant in particular finds a rare word's
    memories by intersecting the GIN match with the asking tenant's whole index (every memory of the large tenant);
    planned for the tenant on each call (`mnemoflow_matching`), it is not."""
    owner = store["owner"]
    with owner.session() as s:
        s.execute(text("ALTER TABLE memories ALTER COLUMN user_id SET (n_distinct = 1000)"))
        s.execute(text("ANALYZE memories"))
    try:
        before = tenant_index_scans(owner)
        with store["app"].reading(LARGE) as s:
            s.execute(text("SET plan_cache_mode = force_generic_plan"))
            try:
                for _ in range(8):
                    found = bm25.lexical_candidates(
                        s, LARGE, "fact 2000-17", limit=16, where=MemoryFilter(), params=LexicalParams()
                    )
            finally:
                s.execute(text("RESET plan_cache_mode"))
            send_statistics(s)
        after = tenant_index_scans(owner)
    finally:
        with owner.session() as s:
            s.execute(text("ALTER TABLE memories ALTER COLUMN user_id RESET (n_distinct)"))
            s.execute(text("ANALYZE memories"))
    with owner.session() as s:
        wanted = s.execute(
            text("SELECT id FROM memories WHERE user_id = :u AND content LIKE '% fact 2000-17'"), {"u": LARGE}
        ).scalar_one()
    assert found and found[0][0] == wanted  # the one memory with the rare word, first
    # Not through the tenant's whole index (on a table this small, planned for the tenant, the match reads the
    # table, where a large store's reads the GIN index alone)
    assert after == before


def test_a_filtered_full_text_match_keeps_to_the_filter(store):
    """A `MemoryFilter` goes into `mnemoflow_matching`'s statement with its values: of the small tenant's memories
    with a common word, only its tagged ones of 2023."""
    where = MemoryFilter(
        tags=["third"],
        occurred_after=datetime(2023, 1, 1, tzinfo=UTC),
        occurred_before=datetime(2023, 12, 31, tzinfo=UTC),
    )
    with store["app"].reading(SMALL) as s:
        everything = bm25.lexical_candidates(s, SMALL, "fact", limit=50, where=MemoryFilter(), params=LexicalParams())
        filtered = bm25.lexical_candidates(s, SMALL, "fact", limit=50, where=where, params=LexicalParams())
    assert len(everything) == 20
    assert len(filtered) == 7  # memories 0, 3, ..., 18 of the 20
    assert {memory_id for memory_id, _ in filtered} < {memory_id for memory_id, _ in everything}


@pytest.fixture(scope="module")
def importer(store) -> str:
    """A tenant that has just stored 1,000 memories in bulk: every vector in the fresh tier (its words counted as they
    were stored), and the statistics (analysed) saying so."""
    engine = store["engine"]
    items = [MemoryCreate(content=c) for c in texts(1_000, seed=1_000)]
    with store["app"].session(IMPORTER) as s:
        engine.store(s, engine.prepare(items, IMPORTER)[0], settle=False)
        send_statistics(s)  # the store's own scans counted before any test reads the counters
    with store["owner"].session() as s:
        s.execute(text("ANALYZE memory_vectors"))
        s.execute(text("ANALYZE fresh_codes"))
        s.execute(text("ANALYZE memories"))
    return IMPORTER


def fresh_code_scans(owner: Database) -> dict[str, int]:
    """Sequential scans so far of `fresh_codes`, and scans of its (user_id, dim) index."""
    with owner.session() as s:
        s.execute(text("SELECT pg_stat_clear_snapshot()"))
        seq = s.execute(text("SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'fresh_codes'")).scalar_one()
        user = s.execute(
            text("SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = 'fresh_codes_user'")
        ).scalar_one()
    return {"seq": int(seq), "user": int(user)}


def test_a_tenant_with_nothing_fresh_does_not_read_another_tenants_burst(store, importer):
    """While another tenant's burst waits in the fresh tier, the first pass of a tenant with nothing fresh is planned
    for that tenant (`mnemoflow_fresh`, migration 0019) and looks up its own codes, instead of reading every code in
    the table on the plan kept for the average tenant (6 ms a query beside 108,000 waiting codes)."""
    before = fresh_code_scans(store["owner"])
    found = search_as(store, SMALL, texts(20, seed=20)[5])
    after = fresh_code_scans(store["owner"])
    assert found  # its settled rows, found by the rest of the search
    assert after["seq"] == before["seq"]  # never the whole table ...
    assert after["user"] > before["user"]  # ... but the tenant's own entries


def test_a_tenant_whose_vectors_wait_for_their_merge_does_not_walk_the_index(store, importer):
    """Every vector of the tenant is fresh, and the statistics know it: planned for it, its settled rows' search reads
    its (none) through the (user_id, dim, indexed) index, instead of walking the HNSW index, which holds only
    other tenants' vectors, until `hnsw.max_scan_tuples` (24-64 ms a sector beside a 100,000-memory tenant). Its own
    text is still found first, in the fresh tier."""
    asked = texts(1_000, seed=1_000)[321]
    before = index_scans(store["owner"])
    found = search_as(store, importer, asked)
    after = index_scans(store["owner"])
    with store["owner"].session() as s:
        own = s.execute(
            text("SELECT id FROM memories WHERE user_id = :u AND content = :c"), {"u": importer, "c": asked}
        ).scalar_one()
    assert found[0][0] == own
    assert after["hnsw"] == before["hnsw"]  # never the shared graph ...
    assert after["user_dim"] > before["user_dim"]  # ... but the tenant's own settled entries (none)


def test_an_importers_words_are_counted_as_stored_so_a_common_one_selects_nothing(store, importer):
    """The importer's memories wait for their merge, but their words were counted when they were stored: "fact", in
    every one of its 1,000 memories, and the ten words, each in about a third, are common and only score, and the
    full-text match reads the memories with the rarest words. (Counted at the merge, every word looked rare
    meanwhile, and a query read every memory with them: 300 ms a query for a tenant importing 100,000.)"""
    asked = texts(1_000, seed=1_000)[321]  # four of the ten words, then "fact 1000-321"
    params = LexicalParams(common_min_df=0)  # common: in more than 5 % of the tenant's memories (each word is in ~35 %)
    with store["app"].reading(importer) as s:
        terms = {t.lexeme: t for t in bm25.term_stats(s, importer, asked, params)}
        plan = bm25.lexical_plan(list(terms.values()), importer, limit=16, where=MemoryFilter(), params=params)
        assert plan is not None
        statement, bind = plan
        found = read_rows(s, statement, bind)
        explained = read_rows(s, "EXPLAIN (ANALYZE, TIMING OFF) " + statement, bind)
    assert terms["fact"].df == terms["fact"].documents == 1_000  # counted before any merge
    assert "fact" not in bind["selector"]
    (matched,) = [row[0] for row in explained if "Function Scan on mnemoflow_matching" in row[0]]
    assert int(float(re.search(r"actual rows=([\d.]+)", matched).group(1))) < 50  # of the 1,000 with "fact"
    with store["owner"].session() as s:
        own = s.execute(
            text("SELECT id FROM memories WHERE user_id = :u AND content = :c"), {"u": importer, "c": asked}
        ).scalar_one()
    assert found[0].id == own


def test_the_fresh_codes_function_shows_a_tenant_no_code_of_another(store, importer):
    """`mnemoflow_fresh` asked as another tenant for the importer's codes returns none (the caller's row-level
    security holds inside it); asked as the importer, its nearest codes."""
    engine = store["engine"]
    code = search.binary_code(np.asarray(engine.embedder.embed(["harbour invoice"])[0]))
    call = text(
        "SELECT * FROM mnemoflow_fresh(ARRAY['episodic', 'semantic', 'procedural', 'emotional', 'reflective'], 384, "
        ":u, :m, CAST(:code AS varbit), 50)"
    )
    params = {"u": importer, "m": engine.embedder.model, "code": code}
    with store["app"].reading(SMALL) as s:
        theirs = s.execute(call, params).all()
    with store["app"].reading(importer) as s:
        own = s.execute(call, params).all()
    assert theirs == [] and len(own) == 50
