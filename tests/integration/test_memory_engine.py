"""The HSG write and read paths against real PostgreSQL + pgvector."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from sqlalchemy import text

from shared.embedding import SyntheticEmbedder
from shared.errors import Conflict, NotFound
from shared.memory_service import MemoryEngine
from shared.schemas import MemoryCreate, QueryFilters, RetrievalOptions
from shared.sectors import SECTOR_CONFIGS, SECTORS
from shared.storage import jobs as job_store
from shared.storage import memories as store

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def engine(settings):
    return MemoryEngine(settings, SyntheticEmbedder(dim=384))


def add(db, engine, tenant, content, **kw):
    with db.session() as s:
        memory, dedup = engine.add(s, tenant, MemoryCreate(content=content, **kw))
    return memory, dedup


def query(db, engine, tenant, q, k=8, **filters):
    with db.session() as s:
        return engine.query(s, tenant, q, k=k, filters=QueryFilters(**filters))


def test_add_classifies_embeds_and_stores_a_vector_per_sector(db, engine, tenant):
    memory, dedup = add(db, engine, tenant, "I feel so happy and excited about the trip today", tags=["trip"])
    assert not dedup
    assert memory["primary_sector"] in SECTOR_CONFIGS
    assert memory["decay_lambda"] == pytest.approx(SECTOR_CONFIGS[memory["primary_sector"]].decay_lambda)
    expected_salience = min(1.0, 0.4 + 0.1 * (len(memory["sectors"]) - 1))
    assert memory["salience"] == pytest.approx(expected_salience)
    with db.session() as s:
        rows = s.execute(
            text("SELECT tableoid::regclass::text AS part, sector, dim FROM memory_vectors WHERE memory_id = :id"),
            {"id": memory["id"]},
        ).all()
    assert sorted(r.sector for r in rows) == sorted(memory["sectors"])
    assert all(r.part == f"memory_vectors_{r.sector}" for r in rows)  # partitioned by sector
    assert {r.dim for r in rows} == {engine.embedder.dim}


def test_same_content_twice_returns_the_existing_memory(db, engine, tenant):
    first, _ = add(db, engine, tenant, "The deploy key lives in the vault under ops/deploy")
    again, dedup = add(db, engine, tenant, "  The deploy key lives in the vault   under ops/deploy \n")
    assert dedup and again["id"] == first["id"]
    other_case, dedup_case = add(db, engine, tenant, "the deploy key lives in the vault under ops/deploy")
    assert not dedup_case and other_case["id"] != first["id"]  # exact match only, never lossy
    with db.session() as s:
        count = s.execute(text("SELECT count(*) FROM memories WHERE user_id = :u"), {"u": tenant}).scalar_one()
    assert count == 2


def test_distinct_short_memories_are_never_merged(db, engine, tenant):
    # OpenMemory's simhash dedup dropped many of these; exact-hash dedup must keep every one.
    contents = [f"User likes colour number {i}" for i in range(60)] + ["cats", "cat", "Cats", "dogs"]
    for c in contents:
        add(db, engine, tenant, c)
    with db.session() as s:
        count = s.execute(text("SELECT count(*) FROM memories WHERE user_id = :u"), {"u": tenant}).scalar_one()
    assert count == len(contents)


def test_waypoint_links_a_near_duplicate_but_not_an_unrelated_memory(db, engine, tenant):
    a, _ = add(db, engine, tenant, "Alice prefers green tea with honey every morning before work")
    b, _ = add(db, engine, tenant, "Alice prefers green tea with honey every morning before her work")
    c, _ = add(db, engine, tenant, "Quarterly revenue figures were uploaded to the finance share")
    with db.session() as s:
        links = s.execute(text("SELECT src_id, dst_id, weight FROM waypoints WHERE user_id = :u"), {"u": tenant}).all()
    pairs = {(r.src_id, r.dst_id) for r in links}
    assert (b["id"], a["id"]) in pairs
    assert all(r.weight >= 0.75 for r in links)
    assert not any(c["id"] in pair for pair in pairs)


def test_query_finds_by_words_and_ranks_the_relevant_memory_first(db, engine, tenant):
    add(db, engine, tenant, "The staging database password rotates every Monday")
    add(db, engine, tenant, "Bob's birthday party is on the 14th of March")
    add(db, engine, tenant, "Use pnpm instead of npm in the frontend repository")
    outcome = query(db, engine, tenant, "when is Bob's birthday?")
    assert outcome.matches, "expected at least one match"
    best, row = outcome.matches[0]
    assert "birthday" in row["content"]
    assert best.lexical_rank == 1 and best.dense_rank is not None
    assert set(best.components) >= {"similarity", "salience", "recency", "waypoint"}


def test_tenants_never_see_each_other(db, engine, tenant):
    other = f"{tenant}-other"
    add(db, engine, other, "Secret launch code for project falcon is 4471")
    add(db, engine, tenant, "Project falcon status meeting moved to Thursday")
    outcome = query(db, engine, tenant, "project falcon launch code")
    contents = [row["content"] for _, row in outcome.matches]
    assert contents == ["Project falcon status meeting moved to Thursday"]


@pytest.mark.parametrize("kind", ["association", "next"])  # `next`: a document's reading order
def test_one_hop_waypoint_surfaces_a_memory_with_no_direct_hit(db, engine, tenant, kind):
    seed, _ = add(db, engine, tenant, "Kubernetes cluster upgrade scheduled for Saturday night")
    linked, _ = add(db, engine, tenant, "Remember to notify the on-call rotation beforehand")
    with db.session() as s:
        s.execute(text("DELETE FROM waypoints WHERE user_id = :u"), {"u": tenant})  # only the link made here
        s.execute(
            text("INSERT INTO waypoints (src_id, dst_id, user_id, kind, weight) VALUES (:a, :b, :u, :k, 0.9)"),
            {"a": seed["id"], "b": linked["id"], "u": tenant, "k": kind},
        )
    outcome = query(db, engine, tenant, "kubernetes cluster upgrade")
    by_id = {c.id: c for c, _ in outcome.matches}
    assert seed["id"] in by_id and linked["id"] in by_id
    hop = by_id[linked["id"]]
    assert hop.hops == 1 and hop.via == seed["id"] and hop.waypoint_weight == pytest.approx(0.9)
    assert hop.lexical_rank is None and hop.path == [str(seed["id"]), str(linked["id"])]
    assert (seed["id"], linked["id"]) in outcome.traversed


def test_activation_reaches_two_hops_and_reinforces_each_link_walked(db, engine, tenant):
    seed, _ = add(db, engine, tenant, "Kubernetes cluster upgrade scheduled for Saturday night")
    mid, _ = add(db, engine, tenant, "Remember to notify the on-call rotation beforehand")
    far, _ = add(db, engine, tenant, "Priya carries the pager this month")
    with db.session() as s:
        for src, dst in ((seed["id"], mid["id"]), (far["id"], mid["id"])):  # the second against the walk
            s.execute(
                text("INSERT INTO waypoints (src_id, dst_id, user_id, weight) VALUES (:a, :b, :u, 0.9)"),
                {"a": src, "b": dst, "u": tenant},
            )
    with db.session() as s:  # full-text seeds only: the far memory can come in through the links alone
        outcome = engine.query(
            s, tenant, "kubernetes cluster upgrade", k=8, filters=QueryFilters(), options=RetrievalOptions(dense=False)
        )
    by_id = {c.id: c for c, _ in outcome.matches}
    reached = by_id[far["id"]]
    assert reached.hops == 2 and reached.path == [str(seed["id"]), str(mid["id"]), str(far["id"])]
    assert reached.lexical_rank is None and reached.waypoint_weight == pytest.approx(0.81)
    assert {(seed["id"], mid["id"]), (mid["id"], far["id"])} <= set(outcome.traversed)
    assert by_id[mid["id"]].hops == 1


def test_each_stage_can_be_switched_off(db, engine, tenant):
    seed, _ = add(db, engine, tenant, "Kubernetes cluster upgrade scheduled for Saturday night")
    linked, _ = add(db, engine, tenant, "Remember to notify the on-call rotation beforehand")
    add(db, engine, tenant, "Quarterly revenue rose by four percent")
    with db.session() as s:
        s.execute(
            text("INSERT INTO waypoints (src_id, dst_id, user_id, weight) VALUES (:a, :b, :u, 0.9)"),
            {"a": seed["id"], "b": linked["id"], "u": tenant},
        )

    def ask(**options):
        with db.session() as s:
            return engine.query(
                s, tenant, "kubernetes upgrade", k=8, filters=QueryFilters(), options=RetrievalOptions(**options)
            ).matches

    lexical_only = ask(dense=False, waypoints=False, rank="fusion")
    assert [c.id for c, _ in lexical_only] == [seed["id"]]  # the one memory with the words
    assert lexical_only[0][0].dense_rank is None and lexical_only[0][0].score == lexical_only[0][0].rrf_score
    dense_only = ask(lexical=False, waypoints=False, rank="fusion")
    assert all(c.lexical_rank is None and c.dense_rank is not None for c, _ in dense_only)
    assert [c.rrf_score for c, _ in dense_only] == sorted((c.rrf_score for c, _ in dense_only), reverse=True)
    assert linked["id"] not in {c.id for c, _ in ask(dense=False, waypoints=False)}
    assert linked["id"] in {c.id for c, _ in ask(dense=False)}  # only through the waypoint
    with pytest.raises(ValueError, match="at least one of lexical and dense"):
        RetrievalOptions(lexical=False, dense=False)


def test_diversity_lets_a_different_memory_pass_a_near_duplicate(db, engine, tenant):
    first, _ = add(db, engine, tenant, "I prefer Python for data science projects")
    twin, _ = add(db, engine, tenant, "I prefer Python for data science work")
    other, _ = add(db, engine, tenant, "Our team is small: three engineers on data projects")

    def ranked(**kw):
        with db.session() as s:
            outcome = engine.query(s, tenant, "python data science preference", k=3, filters=QueryFilters(), **kw)
        return outcome.matches

    plain = [c.id for c, _ in ranked()]
    assert plain == [first["id"], twin["id"], other["id"]]
    diverse = ranked(diversity=0.5)
    assert [c.id for c, _ in diverse] == [first["id"], other["id"], twin["id"]]
    redundancy = {c.id: c.components["redundancy"] for c, _ in diverse}
    assert redundancy[first["id"]] == 0.0 and redundancy[twin["id"]] > redundancy[other["id"]]
    assert [c.id for c, _ in ranked(diversity=1.0)] == plain  # lambda 1: relevance alone


def test_the_weaker_of_two_contradicting_memories_is_demoted(db, engine, tenant):
    old, _ = add(db, engine, tenant, "The office wifi password is tulip42", salience=0.3)
    new, _ = add(db, engine, tenant, "The office wifi password is orchid77", salience=0.9)

    def scores():
        with db.session() as s:
            outcome = engine.query(s, tenant, "office wifi password", k=5, filters=QueryFilters(min_score=0))
        return {c.id: c for c, _ in outcome.matches}

    before = scores()
    with db.session() as s:
        assert store.create_link(s, tenant, new["id"], old["id"], kind="contradicts", weight=1.0)
    after = scores()
    assert after[old["id"]].score == pytest.approx(before[old["id"]].score * 0.3)
    assert after[old["id"]].components["conflict_penalty"] == 0.3
    assert after[new["id"]].score == pytest.approx(before[new["id"]].score)  # the stronger one keeps its score

    with db.session() as s:  # supersedes marks the older memory; OpenMem's status penalty halves it
        assert store.create_link(s, tenant, new["id"], old["id"], kind="supersedes", weight=1.0)
        assert store.get_memory(s, tenant, old["id"])["status"] == "superseded"
        assert not store.create_link(s, f"{tenant}-other", new["id"], old["id"], kind="association", weight=1.0)
    assert scores()[old["id"]].score == pytest.approx(before[old["id"]].score * 0.5 * 0.3)


def test_filters_by_sector_tags_and_time(db, engine, tenant):
    tagged, _ = add(db, engine, tenant, "Invoice 7781 paid by the client", tags=["billing", "2026"])
    add(db, engine, tenant, "Invoice 7782 still open with the client", tags=["billing"])
    outcome = query(db, engine, tenant, "invoice client", tags=["billing", "2026"])
    assert [c.id for c, _ in outcome.matches] == [tagged["id"]]
    future = datetime.now(UTC) + timedelta(days=1)
    assert query(db, engine, tenant, "invoice client", startTime=future).matches == []
    sector = tagged["primary_sector"]
    outcome = query(db, engine, tenant, "invoice client", sector=sector)
    assert outcome.matches and all(sector in row["sectors"] for _, row in outcome.matches)


def test_recency_weight_lets_the_fresher_of_two_equal_memories_win(db, engine, tenant):
    old, _ = add(db, engine, tenant, "The team offsite is in Porto this spring")
    new, _ = add(db, engine, tenant, "The team offsite is in Lisbon this spring")
    with db.session() as s:  # equally relevant; the Porto memory was last seen long ago but matters more
        s.execute(
            text("UPDATE memories SET last_seen_at = now() - interval '60 days', salience = 0.9 WHERE id = :id"),
            {"id": old["id"]},
        )
        s.execute(text("UPDATE memories SET salience = 0.4 WHERE id = :id"), {"id": new["id"]})

    def first(recency_weight):
        with db.session() as s:
            outcome = engine.query(
                s,
                tenant,
                "team offsite this spring",
                k=2,
                filters=QueryFilters(min_score=0),
                recency_weight=recency_weight,
            )
        return outcome.matches[0][1]["content"]

    assert first(0.0) == old["content"]  # relevance and importance: the salient one
    assert first(1.0) == new["content"]  # freshness weighs as much as relevance


def test_query_classification_narrows_the_dense_search_to_the_querys_sectors(db, engine, tenant):
    fact, _ = add(db, engine, tenant, "Quarterly revenue figures were uploaded to the finance share")
    assert "emotional" not in fact["sectors"]

    def run(classify: bool):
        with db.session() as s:
            return engine.query(
                s,
                tenant,
                "the quarterly revenue figures make me feel so sad and angry",
                k=5,
                filters=QueryFilters(min_score=0),
                options=RetrievalOptions(lexical=False, classify=classify),
            )

    narrowed, everywhere = run(True), run(False)
    assert "emotional" in narrowed.query_sectors and len(narrowed.query_sectors) < 5
    assert fact["id"] not in [c.id for c, _ in narrowed.matches]  # its vectors are in no sector of the query's
    assert fact["id"] in [c.id for c, _ in everywhere.matches]  # the vector search of all sectors finds it
    assert everywhere.query_sectors == SECTORS


def test_min_score_gate_drops_weak_matches(db, engine, tenant):
    add(db, engine, tenant, "The cafeteria serves lasagna on Wednesdays")
    assert query(db, engine, tenant, "lasagna wednesday", min_score=0.0).matches
    assert query(db, engine, tenant, "lasagna wednesday", min_score=0.99).matches == []


def test_reinforcement_applies_once_per_event(db, engine, tenant):
    memory, _ = add(db, engine, tenant, "Grandma's recipe needs two cups of flour", salience=0.35)
    for _ in range(2):  # a redelivered message
        with db.session() as s:
            engine.reinforce_hits(
                s, event_id=f"query:{tenant}", user_id=tenant, memory_ids=[memory["id"]], traversed=[]
            )
    with db.session() as s:
        row = store.get_memory(s, tenant, memory["id"])
    assert row is not None
    assert row["salience"] == pytest.approx(0.85)  # decay seed: 0.35 + 0.5, once
    assert row["coactivations"] == 1


def test_traversed_waypoints_strengthen_and_weak_ones_are_pruned(db, engine, tenant):
    a, _ = add(db, engine, tenant, "Server room badge is kept at reception")
    b, _ = add(db, engine, tenant, "Reception closes at six in the evening")
    c, _ = add(db, engine, tenant, "Printer toner is ordered monthly")
    with db.session() as s:
        s.execute(
            text(
                "INSERT INTO waypoints (src_id, dst_id, user_id, weight) VALUES (:a, :b, :u, 0.98), (:a, :c, :u, 0.01)"
            ),
            {"a": a["id"], "b": b["id"], "c": c["id"], "u": tenant},
        )
        engine.reinforce_hits(
            s, event_id=f"q2:{tenant}", user_id=tenant, memory_ids=[b["id"]], traversed=[(a["id"], b["id"])]
        )
    with db.session() as s:
        weight = s.execute(
            text("SELECT weight FROM waypoints WHERE src_id = :a AND dst_id = :b"),
            {"a": a["id"], "b": b["id"]},
        ).scalar_one()
        assert weight == pytest.approx(1.0)  # +0.05, capped at 1.0
        removed = store.prune_waypoints(s, below=0.05)
        assert removed >= 1
        left = s.execute(text("SELECT count(*) FROM waypoints WHERE src_id = :a"), {"a": a["id"]}).scalar_one()
    assert left == 1


def test_update_reembeds_and_refuses_duplicate_content(db, engine, tenant):
    a, _ = add(db, engine, tenant, "Meeting notes: discuss the roadmap")
    b, _ = add(db, engine, tenant, "How to reset the router step by step")
    with db.session() as s:
        updated = engine.update(s, tenant, a["id"], {"content": "I feel anxious about the roadmap review"})
    assert updated["content"].startswith("I feel anxious")
    assert updated["primary_sector"] == "emotional"
    with db.session() as s:
        sectors = s.execute(
            text("SELECT array_agg(sector ORDER BY sector) FROM memory_vectors WHERE memory_id = :id"),
            {"id": a["id"]},
        ).scalar_one()
    assert sorted(sectors) == sorted(updated["sectors"])
    with pytest.raises(Conflict), db.session() as s:
        engine.update(s, tenant, a["id"], {"content": b["content"]})
    with pytest.raises(NotFound), db.session() as s:
        engine.update(s, tenant, uuid.uuid4(), {"tags": ["x"]})


def test_batch_chunk_is_stored_exactly_once(db, engine, tenant):
    items = [{"content": f"Batch fact number {i} about the warehouse"} for i in range(30)]
    items.append({"content": "Batch fact number 0 about the warehouse"})  # a duplicate inside the batch
    with db.session() as s:
        job_id, created = job_store.create_job(
            s, user_id=tenant, kind="batch", total=len(items), params={}, idempotency_key=None
        )
        job_store.add_chunks(s, job_id, [job_store.ChunkSpec(0, "semantic", items)])
    assert created
    for _ in range(2):  # the second run is a redelivery
        with db.session() as s:
            job_store.start_attempt(s, job_id, 0)
        with db.session() as s:
            engine.store_chunk(s, job_id, 0)
    with db.session() as s:
        count = s.execute(text("SELECT count(*) FROM memories WHERE user_id = :u"), {"u": tenant}).scalar_one()
        job = job_store.get_job(s, job_id)
        totals = job_store.chunk_totals(s, job_id)
    assert count == 30
    assert job is not None and job["status"] == "succeeded" and job["progress_done"] == len(items)
    assert totals == {"created": 30, "duplicates": 1}


def test_bulk_memories_are_queryable_at_once_and_merge_into_the_index(db, engine, tenant):
    near = ["Ferry to Harwich departs at 07:15 from pier 2", "Ferry to Harwich departs at 07:15 from pier two"]
    items = [{"content": c} for c in near] + [{"content": f"Container {i} cleared customs"} for i in range(40)]
    with db.session() as s:
        job_id, _ = job_store.create_job(
            s, user_id=tenant, kind="batch", total=len(items), params={}, idempotency_key=None
        )
        job_store.add_chunks(s, job_id, [job_store.ChunkSpec(0, "semantic", items)])
    with db.session() as s:
        engine.store_chunk(s, job_id, 0)
    with db.session() as s:
        fresh = s.execute(
            text("SELECT count(*) FROM memory_vectors WHERE user_id = :u AND NOT indexed"), {"u": tenant}
        ).scalar_one()
    assert fresh >= len(items)  # landed in the fresh tier, not yet in HNSW
    before = query(db, engine, tenant, "ferry Harwich pier")
    assert before.matches[0][1]["content"] in near
    assert before.matches[0][0].dense_rank is not None  # found by the exact scan of the fresh tier

    while True:
        with db.session() as s:
            moved, _ = engine.merge_fresh(s, limit=7)  # small batches: several rounds
        if moved == 0:
            break
    with db.session() as s:
        left = s.execute(
            text("SELECT count(*) FROM memory_vectors WHERE user_id = :u AND NOT indexed"), {"u": tenant}
        ).scalar_one()
        links = s.execute(text("SELECT count(*) FROM waypoints WHERE user_id = :u"), {"u": tenant}).scalar_one()
    assert left == 0
    assert links >= 1  # the two ferry notes linked when they settled
    after = query(db, engine, tenant, "ferry Harwich pier")
    assert after.matches[0][1]["content"] in near and after.matches[0][0].dense_rank is not None


def _term_df(db, tenant, lexeme):
    with db.session() as s:
        return s.execute(
            text("SELECT df FROM term_stats WHERE user_id = :u AND lexeme = :l"), {"u": tenant, "l": lexeme}
        ).scalar_one_or_none()


def _documents(db, tenant):
    with db.session() as s:
        return s.execute(text("SELECT documents FROM tenant_stats WHERE user_id = :u"), {"u": tenant}).scalar_one()


def test_bm25_statistics_follow_add_update_and_delete(db, engine, tenant):
    a, _ = add(db, engine, tenant, "Zanzibar spice market opens early")
    b, _ = add(db, engine, tenant, "The spice rack needs cumin")
    assert _term_df(db, tenant, "spice") == 2 and _term_df(db, tenant, "zanzibar") == 1
    assert _documents(db, tenant) == 2
    with db.session() as s:
        engine.update(s, tenant, a["id"], {"content": "Harbour market opens early"})
    assert _term_df(db, tenant, "spice") == 1 and _term_df(db, tenant, "zanzibar") == 0
    assert _term_df(db, tenant, "harbour") == 1
    with db.session() as s:
        assert engine.delete(s, tenant, b["id"])
    assert _term_df(db, tenant, "spice") == 0 and _documents(db, tenant) == 1


def test_a_tag_change_keeps_the_bm25_statistics_exact(db, engine, tenant):
    memory, _ = add(db, engine, tenant, "Harbour market opens early", tags=["fish"])
    with db.session() as s:
        engine.update(s, tenant, memory["id"], {"tags": ["zebra"]})
    assert _term_df(db, tenant, "zebra") == 1 and _term_df(db, tenant, "fish") == 0
    with db.session() as s:
        engine.update(s, tenant, memory["id"], {"content": "Harbour market closes late", "tags": ["eel"]})
    assert _term_df(db, tenant, "eel") == 1 and _term_df(db, tenant, "zebra") == 0
    assert _term_df(db, tenant, "close") == 1 and _term_df(db, tenant, "open") == 0
    assert _documents(db, tenant) == 1


def test_bulk_memories_are_counted_once_when_they_settle(db, engine, tenant):
    items = [{"content": f"Lighthouse keeper log entry {i}"} for i in range(12)]
    with db.session() as s:
        job_id, _ = job_store.create_job(s, user_id=tenant, kind="batch", total=12, params={}, idempotency_key=None)
        job_store.add_chunks(s, job_id, [job_store.ChunkSpec(0, "semantic", items)])
    with db.session() as s:
        engine.store_chunk(s, job_id, 0)
    assert _term_df(db, tenant, "lighthous") is None  # fresh: not counted yet, still found by the rare-term path
    assert query(db, engine, tenant, "lighthouse keeper").matches
    for _ in range(3):  # merging again finds nothing left to count
        with db.session() as s:
            engine.merge_fresh(s, limit=100_000)
    assert _term_df(db, tenant, "lighthous") == 12 and _documents(db, tenant) == 12


def test_a_rare_word_outranks_a_common_one(db, engine, tenant):
    for i in range(30):
        add(db, engine, tenant, f"Coffee order number {i} was delivered")
    rare, _ = add(db, engine, tenant, "Meeting with the Zanzibar delegation")
    with db.session() as s:
        hits = store.lexical_candidates(
            s, tenant, "coffee zanzibar", limit=5, where=store.MemoryFilter(), params=engine.lexical
        )
    assert hits[0][0] == rare["id"]
    assert hits[0][1] > hits[1][1] > 0


def test_a_term_said_more_often_scores_higher_when_lengths_are_equal(db, engine, tenant, settings):
    for word in ("north", "south", "east", "west", "crane", "dock", "pier", "quay"):
        add(db, engine, tenant, f"Harbour {word} passed")  # three lexemes each, like the two below: avg length 3
    twice, _ = add(db, engine, tenant, "volcano ash, pumice volcano")  # lexemes volcano (x2), ash, pumic
    once, _ = add(db, engine, tenant, "volcano ash under lava")  # volcano, ash, lava: the same length
    binary = MemoryEngine(settings.model_copy(update={"bm25_term_frequency": False}), engine.embedder)
    with db.session() as s:
        hits = dict(
            store.lexical_candidates(s, tenant, "volcano", limit=5, where=store.MemoryFilter(), params=engine.lexical)
        )
        flat = dict(
            store.lexical_candidates(s, tenant, "volcano", limit=5, where=store.MemoryFilter(), params=binary.lexical)
        )
    assert hits[twice["id"]] > hits[once["id"]] > 0
    k1 = settings.bm25_k1  # tf 2 against tf 1 at the same length: (2 (k1+1)/(2+k1)) / ((k1+1)/(1+k1))
    assert hits[twice["id"]] / hits[once["id"]] == pytest.approx(2 * (1 + k1) / (2 + k1), rel=1e-6)
    assert flat[twice["id"]] == pytest.approx(flat[once["id"]])  # switched off: a match counts once


def test_a_sequence_batch_links_its_items_in_order_across_sector_chunks_once(db, engine, tenant):
    from shared.memory_service import SEQUENCE_KEY

    turns = ["Ana: shall we book the Lisbon flat?", "Ben: I feel so happy about it!", "Ana: booked, 3 nights"]
    chunks = [  # the gateway routes items by sector: order survives only in each item's position
        job_store.ChunkSpec(
            0, "episodic", [{"content": turns[0], SEQUENCE_KEY: 0}, {"content": turns[2], SEQUENCE_KEY: 2}]
        ),
        # the last item says the first again: one memory, kept at its first place (no link back to the start)
        job_store.ChunkSpec(
            1, "emotional", [{"content": turns[1], SEQUENCE_KEY: 1}, {"content": turns[0], SEQUENCE_KEY: 3}]
        ),
    ]
    with db.session() as s:
        job_id, _ = job_store.create_job(
            s, user_id=tenant, kind="batch", total=4, params={"sequence": True}, idempotency_key=None
        )
        job_store.add_chunks(s, job_id, chunks)
    for seq in (1, 0, 1, 0):  # out of order, each delivered twice
        with db.session() as s:
            engine.store_chunk(s, job_id, seq)
    with db.session() as s:
        links = s.execute(
            text(
                "SELECT a.content AS src, b.content AS dst FROM waypoints w JOIN memories a ON a.id = w.src_id "
                "JOIN memories b ON b.id = w.dst_id WHERE w.user_id = :u AND w.kind = 'next' ORDER BY a.content"
            ),
            {"u": tenant},
        ).all()
        job = job_store.get_job(s, job_id)
    assert sorted((r.src, r.dst) for r in links) == sorted([(turns[0], turns[1]), (turns[1], turns[2])])
    assert job is not None and job["status"] == "succeeded" and job["result"]["next_links"] == 2
    with db.session() as s:  # a second sequence that repeats a stored turn does not run through it
        again, _ = job_store.create_job(
            s, user_id=tenant, kind="batch", total=2, params={"sequence": True}, idempotency_key=None
        )
        job_store.add_chunks(
            s,
            again,
            [
                job_store.ChunkSpec(
                    0, "episodic", [{"content": turns[2], SEQUENCE_KEY: 0}, {"content": "Ben: great", SEQUENCE_KEY: 1}]
                )
            ],
        )
    with db.session() as s:
        engine.store_chunk(s, again, 0)
        assert job_store.get_job(s, again)["result"]["next_links"] == 0


def test_select_budget_lets_the_rarest_terms_select_and_the_others_only_score(db, engine, tenant, settings):
    for i in range(6):
        add(db, engine, tenant, f"Canal barge number {i} moored")
    rare, _ = add(db, engine, tenant, "Canal barge with a heron on deck")
    budgeted = MemoryEngine(settings.model_copy(update={"lexical_select_budget": 3}), engine.embedder)
    with db.session() as s:
        everything = store.lexical_candidates(
            s, tenant, "barge heron", limit=20, where=store.MemoryFilter(), params=engine.lexical
        )
        bounded = store.lexical_candidates(
            s, tenant, "barge heron", limit=20, where=store.MemoryFilter(), params=budgeted.lexical
        )
    assert len(everything) == 7 and everything[0][0] == rare["id"]
    # "heron" (df 1) selects; "barge" (df 7) would pass the budget of 3, so it only scores what heron found
    assert [i for i, _ in bounded] == [rare["id"]] and bounded[0][1] == pytest.approx(everything[0][1])
    assert store.select_terms(["b", "a", "c"], {"a": 1, "b": 5, "c": 2}, budget=3) == ["a", "c"]
    assert store.select_terms(["b"], {"b": 50}, budget=3) == ["b"]  # the rarest always selects
    assert store.select_terms(["b", "a"], {"a": 1, "b": 5}, budget=0) == ["b", "a"]


def test_beyond_the_rescore_window_the_count_once_score_picks_what_term_frequency_ranks(db, engine, tenant, settings):
    plain = [add(db, engine, tenant, f"Lantern {word} on the porch")[0] for word in ("red", "tin", "old", "new")]
    longer = add(db, engine, tenant, "Lantern beside the blue front door")[0]
    repeated = add(
        db, engine, tenant, "Lantern lantern lantern lantern lantern by the garden gate near a big oak tree"
    )[0]

    def lantern(window: int) -> list[tuple[uuid.UUID, float]]:
        windowed = MemoryEngine(settings.model_copy(update={"lexical_rescore_window": window}), engine.embedder)
        with db.session() as s:
            return store.lexical_candidates(
                s, tenant, "lantern", limit=6, where=store.MemoryFilter(), params=windowed.lexical
            )

    exact = lantern(0)
    assert exact[0][0] == repeated["id"]  # five positions of the word outweigh its length
    assert exact[-1][0] == longer["id"]
    # 6 memories may match, more than a window of 5: the 5 best by the count-once score (the fewest distinct
    # words; not the one that says the word five times among eight words) are scored with term frequency
    windowed = lantern(5)
    assert {i for i, _ in windowed} == {m["id"] for m in plain} | {longer["id"]}
    assert dict(windowed) == pytest.approx({i: score for i, score in exact if i != repeated["id"]})
    assert lantern(6) == exact  # a window as large as the matches changes nothing


def _common_word_hits(db, engine, tenant, settings, query: str, window: int):
    """Full-text candidates where a word in a tenth of the memories is common, with this rescore window."""
    common = settings.model_copy(
        update={"lexical_common_ratio": 0.1, "lexical_common_min_df": 0, "lexical_rescore_window": window}
    )
    with db.session() as s:
        found = store.lexical_candidates(
            s, tenant, query, limit=20, where=store.MemoryFilter(), params=MemoryEngine(common, engine.embedder).lexical
        )
    return {row.content for row in _contents(db, [i for i, _ in found])}, found


def test_words_too_common_to_rank_by_give_no_full_text_candidates(db, engine, tenant, settings):
    for i in range(10):
        add(db, engine, tenant, f"Weekly report {i} filed")
    for i in range(4):
        add(db, engine, tenant, f"Monthly report {i} filed")

    def hits(window):
        return _common_word_hits(db, engine, tenant, settings, "monthly report", window)

    # both words are common; "report" is in every memory, so only "monthly" narrows: 14 x 4/14 = 4 expected
    contents, found = hits(4)
    assert contents == {f"Monthly report {i} filed" for i in range(4)} and all(score > 0 for _, score in found)
    assert hits(3)[1] == []  # more expected than the window scores: no full-text candidates at all
    assert len(hits(0)[1]) == 4  # no window: the select budget (20,000) is the limit


def test_words_that_go_together_read_at_most_a_window_of_their_matches(db, engine, tenant, settings):
    for i in range(12):
        add(db, engine, tenant, f"Invoice backlog {i} reviewed")
        add(db, engine, tenant, f"Garden fence {i} painted")

    def hits(window):
        return _common_word_hits(db, engine, tenant, settings, "invoice backlog", window)[0]

    invoices = {f"Invoice backlog {i} reviewed" for i in range(12)}
    # Both words are in half the memories: 24 x 1/2 x 1/2 = 6 expected together, within a window of 8; the
    # phrase is in 12. Only 8 of them are read and ranked.
    capped = hits(8)
    assert len(capped) == 8 and capped <= invoices
    assert hits(12) == invoices  # as many as the window: all read
    assert hits(0) == invoices  # no window: the select budget (20,000) is the limit


def _contents(db, ids):
    with db.session() as s:
        return s.execute(text("SELECT content FROM memories WHERE id = ANY(:ids)"), {"ids": ids}).all()


def test_common_terms_select_nothing_alone_but_still_score(db, engine, tenant, settings):
    strict = MemoryEngine(
        settings.model_copy(update={"lexical_common_ratio": 0.2, "lexical_common_min_df": 0}), engine.embedder
    )
    for i in range(10):
        add(db, engine, tenant, f"Weekly report {i} filed")
    odd, _ = add(db, engine, tenant, "Weekly report about the volcano filed")
    with db.session() as s:
        both = store.lexical_candidates(
            s, tenant, "weekly volcano", limit=20, where=store.MemoryFilter(), params=strict.lexical
        )
        only_common = store.lexical_candidates(
            s, tenant, "weekly report", limit=20, where=store.MemoryFilter(), params=strict.lexical
        )
    assert [i for i, _ in both] == [odd["id"]]  # "weekly" is common: only the rare term selects
    assert len(only_common) == 11  # all terms common: they must all match (AND), nothing is lost


def test_the_local_model_finds_a_paraphrase_with_no_shared_word(make_store, settings, tenant):
    from shared.embedding.local import LocalOnnxEmbedder

    _, db = make_store("local_model")  # a store of the local model's own
    local = MemoryEngine(settings.model_copy(update={"embedding_provider": "local"}), LocalOnnxEmbedder())
    for content in (
        "My dog loves running in the park",
        "Quarterly revenue rose by four percent",
        "The printer on floor two is out of toner",
    ):
        add(db, local, tenant, content)
    outcome = query(db, local, tenant, "where does the canine like to play?")
    best, row = outcome.matches[0]
    assert row["content"] == "My dog loves running in the park"
    assert best.lexical_rank is None and best.dense_rank == 1  # found by meaning alone


def test_a_store_refuses_vectors_from_another_model(db):
    from shared.embedding.local import LocalOnnxEmbedder
    from shared.storage.models import ensure_store_model

    with db.session() as s:
        ensure_store_model(s, SyntheticEmbedder(dim=384))  # the test store is a synthetic one
    for other in (SyntheticEmbedder(dim=256), LocalOnnxEmbedder()):
        with pytest.raises(Conflict, match="MNEMOFLOW_EMBEDDING_PROVIDER=synthetic"), db.session() as s:
            ensure_store_model(s, other)
    with db.session() as s:
        rows = s.execute(text("SELECT DISTINCT model, dim FROM sector_models")).all()
    assert rows == [("synthetic-hash-v1", 384)]


def test_the_full_text_stage_on_its_own_session_changes_no_answer(db, engine, tenant):
    for content in (
        "The harbour ferry leaves at seven from pier four",
        "Pier four is closed for repairs until March",
        "I love the smell of the sea at the harbour",
        "Remember to renew the ferry pass before it expires",
    ):
        add(db, engine, tenant, content)
    now = datetime.now(UTC)  # the same moment for both: recency is part of the score
    with db.session() as s:
        alone = engine.query(s, tenant, "harbour ferry pier", k=4, filters=QueryFilters(min_score=0), now=now)
    with db.session() as s:
        beside = engine.query(
            s, tenant, "harbour ferry pier", k=4, filters=QueryFilters(min_score=0), now=now, side_session=db.session
        )
    assert [(c.id, c.score, c.lexical_rank) for c, _ in beside.matches] == [
        (c.id, c.score, c.lexical_rank) for c, _ in alone.matches
    ]
    assert beside.matches[0][0].lexical_rank == 1
    assert "lexical_wait" in beside.timings_ms and "lexical_wait" not in alone.timings_ms
    for outcome in (alone, beside):
        stages = {k: v for k, v in outcome.timings_ms.items() if k != "total"}
        assert {"embed", "lexical", "dense", "fetch", "score", "payload"} <= set(stages)
        assert outcome.timings_ms["total"] > 0
    # one after the other, the stages add up to the total
    assert sum(v for k, v in alone.timings_ms.items() if k != "total") == pytest.approx(
        alone.timings_ms["total"], abs=0.01
    )
    # the model calls come back for the caller to log (the synthetic model has no cache: one call each time)
    assert [(c.status, c.item_count) for c in beside.embed_calls] == [("completed", 1)]


def test_a_failing_full_text_stage_fails_the_query_beside_it(db, engine, tenant):
    add(db, engine, tenant, "A memory to find")

    def broken_session():
        raise RuntimeError("no second connection")

    with db.session() as s, pytest.raises(RuntimeError, match="no second connection"):
        engine.query(s, tenant, "memory", k=3, filters=QueryFilters(), side_session=broken_session)


def _stored_vector(db, memory_id):
    with db.session() as s:
        raw = s.execute(
            text("SELECT embedding::text FROM memory_vectors WHERE memory_id = :id ORDER BY sector LIMIT 1"),
            {"id": memory_id},
        ).scalar_one()
    return np.array(json.loads(raw), dtype=np.float32)


def _embedded_after(engine, content, context):
    return engine.embedder.embed_in_context([content], [context])[0]


def test_a_turn_is_embedded_after_the_turns_it_follows(db, engine, tenant):
    turns = ["Ivo: where did you park the camper van?", "Lea: behind the old mill", "Ivo: by the river?", "Lea: yes"]
    ids: list[uuid.UUID] = []
    for turn in turns:
        with db.session() as s:
            memory, _ = engine.add(s, tenant, MemoryCreate(content=turn), follows=ids[-1] if ids else None)
        ids.append(memory["id"])
    assert engine.settings.embed_context_turns == 2
    np.testing.assert_allclose(_stored_vector(db, ids[0]), engine.embedder.embed([turns[0]])[0], atol=1e-6)
    np.testing.assert_allclose(_stored_vector(db, ids[1]), _embedded_after(engine, turns[1], turns[0]), atol=1e-6)
    for i in (2, 3):  # the two turns before it, oldest first
        expected = _embedded_after(engine, turns[i], f"{turns[i - 2]} {turns[i - 1]}")
        np.testing.assert_allclose(_stored_vector(db, ids[i]), expected, atol=1e-6)
    with db.session() as s:  # what is stored is what a later re-embed or regeneration reads back
        assert engine.stored_contexts(s, tenant, ids) == ["", turns[0], "\n".join(turns[:2]), "\n".join(turns[1:3])]
        assert engine.stored_contexts(s, f"{tenant}-other", ids) == ["", "", "", ""]  # tenants stay apart
    before_edit = [_stored_vector(db, i) for i in ids]
    with db.session() as s:  # new content is embedded after the same turns, and the turn after it again
        engine.update(s, tenant, ids[2], {"content": "Ivo: near the river bank?"})
    expected = _embedded_after(engine, "Ivo: near the river bank?", f"{turns[0]} {turns[1]}")
    np.testing.assert_allclose(_stored_vector(db, ids[2]), expected, atol=1e-6)
    expected = _embedded_after(engine, turns[3], f"{turns[1]} Ivo: near the river bank?")
    np.testing.assert_allclose(_stored_vector(db, ids[3]), expected, atol=1e-6)
    assert not np.allclose(before_edit[3], expected, atol=1e-3)
    for i in (0, 1):  # the turns before it are untouched
        np.testing.assert_array_equal(_stored_vector(db, ids[i]), before_edit[i])


def test_walking_back_a_loop_of_next_links_stops_after_the_turns_asked_for(db, engine, tenant):
    a, _ = add(db, engine, tenant, "Ana: ping")
    b, _ = add(db, engine, tenant, "Ben: pong")
    with db.session() as s:
        store.link_in_order(s, tenant, [a["id"], b["id"], a["id"]])
        before = store.preceding_contents(s, tenant, [a["id"]], turns=5)
    # a <- b <- a <- b <- a <- b: five turns back, oldest first, and no further
    assert before == {a["id"]: ["Ben: pong", "Ana: ping", "Ben: pong", "Ana: ping", "Ben: pong"]}


def test_a_sequence_chunk_embeds_each_item_after_the_context_the_gateway_gave_it(db, engine, tenant):
    from shared.memory_service import CONTEXT_KEY, SEQUENCE_KEY

    items = [
        {"content": "Ana: shall we book the Lisbon flat?", SEQUENCE_KEY: 0},
        {"content": "Ben: yes, three nights", SEQUENCE_KEY: 1, CONTEXT_KEY: "Ana: shall we book the Lisbon flat?"},
    ]
    with db.session() as s:
        job_id, _ = job_store.create_job(
            s, user_id=tenant, kind="batch", total=2, params={"sequence": True}, idempotency_key=None
        )
        job_store.add_chunks(s, job_id, [job_store.ChunkSpec(0, "episodic", items)])
    with db.session() as s:
        engine.store_chunk(s, job_id, 0)
    with db.session() as s:
        rows = s.execute(text("SELECT id, content, meta FROM memories WHERE user_id = :u"), {"u": tenant}).all()
    by_content = {r.content: r for r in rows}
    reply = _stored_vector(db, by_content["Ben: yes, three nights"].id)
    np.testing.assert_allclose(
        reply, _embedded_after(engine, "Ben: yes, three nights", "Ana: shall we book the Lisbon flat?"), atol=1e-6
    )
    question = _stored_vector(db, by_content["Ana: shall we book the Lisbon flat?"].id)
    np.testing.assert_allclose(question, engine.embedder.embed(["Ana: shall we book the Lisbon flat?"])[0], atol=1e-6)
    assert all(r.meta == {} for r in rows)  # the context is not kept as the memory's metadata

    with db.session() as s:  # an edit re-embeds the reply after it, which stays in the fresh tier for its merge
        engine.update(s, tenant, by_content["Ana: shall we book the Lisbon flat?"].id, {"content": "Ana: Porto?"})
        fresh = s.execute(
            text("SELECT bool_and(NOT indexed) FROM memory_vectors WHERE memory_id = :id"),
            {"id": by_content["Ben: yes, three nights"].id},
        ).scalar_one()
    assert fresh is True
    reply = _stored_vector(db, by_content["Ben: yes, three nights"].id)
    np.testing.assert_allclose(reply, _embedded_after(engine, "Ben: yes, three nights", "Ana: Porto?"), atol=1e-6)


def test_of_two_equal_matches_the_one_amid_other_matches_ranks_first(db, engine, tenant, settings):
    # Two memories with the same words for the query; the second follows a turn that matches it too.
    lone, _ = add(db, engine, tenant, "Orla: the glacier hike starts at dawn")
    asked, _ = add(db, engine, tenant, "Nils: when does the glacier hike start")
    with db.session() as s:
        answer = MemoryCreate(content="Nils: the glacier hike starts at noon")
        amid, _ = engine.add(s, tenant, answer, follows=asked["id"])
    alike, _ = add(db, engine, tenant, "Orla: glacier hike gear, crampons and rope")
    with db.session() as s:  # an association link lends nothing: it joins memories that say the same thing
        s.execute(
            text("INSERT INTO waypoints (src_id, dst_id, user_id, weight) VALUES (:a, :b, :u, 0.9)"),
            {"a": lone["id"], "b": alike["id"], "u": tenant},
        )
    options = RetrievalOptions(dense=False)  # full text alone: the two answers' own matches are equal

    def ask(eng):
        with db.session() as s:
            outcome = eng.query(s, tenant, "glacier hike starts", k=8, filters=QueryFilters(), options=options)
        return {c.id: c for c, _ in outcome.matches}, [c.id for c, _ in outcome.matches]

    by_id, order = ask(engine)
    assert by_id[amid["id"]].components["lexical"] == pytest.approx(by_id[lone["id"]].components["lexical"])
    assert order.index(amid["id"]) < order.index(lone["id"])
    lent = by_id[amid["id"]]
    assert lent.support_from == asked["id"]
    question = by_id[asked["id"]].components  # its own relevance: the cosine the fetch measured, and its words
    alpha = settings.fusion_alpha
    own_of_asked = alpha * max(question["cosine"], 0) + (1 - alpha) * question["lexical"]
    assert lent.components["context"] == pytest.approx(settings.context_weight * own_of_asked, abs=1e-5)
    assert by_id[lone["id"]].waypoint_weight > 0  # it is linked, and to a match
    assert "context" not in by_id[lone["id"]].components  # but not in reading order
    off = MemoryEngine(settings.model_copy(update={"context_weight": 0.0}), SyntheticEmbedder(dim=384))
    by_id, _ = ask(off)
    assert "context" not in by_id[amid["id"]].components
    assert by_id[amid["id"]].score < lent.score


def test_a_query_naming_a_month_ranks_what_occurred_then_first(db, engine, tenant, settings):
    in_march, in_may = datetime(2023, 3, 14, tzinfo=UTC), datetime(2023, 5, 9, tzinfo=UTC)
    march, _ = add(db, engine, tenant, "Team shipped the mobile release", occurred_at=in_march)
    may, _ = add(db, engine, tenant, "Team shipped the mobile app release", occurred_at=in_may)
    undated, _ = add(db, engine, tenant, "Team shipped the mobile web release")  # occurred when it was stored
    assert may["occurred_at"] == in_may and undated["occurred_at"] is None

    def ask(q):
        outcome = query(db, engine, tenant, q)
        return {c.id: c for c, _ in outcome.matches}, [c.id for c, _ in outcome.matches]

    by_id, order = ask("what did the team ship in May 2023")
    assert order[0] == may["id"] and by_id[may["id"]].components["period"] == pytest.approx(settings.period_weight)
    assert "period" not in by_id[march["id"]].components and "period" not in by_id[undated["id"]].components
    by_id, order = ask("what did the team ship in March")  # a month alone: that month of any year
    assert order[0] == march["id"] and "period" in by_id[march["id"]].components
    now = datetime.now(UTC)
    by_id, _ = ask(f"what did the team ship in {now.year}")  # no occurred_at: the time it was stored
    assert "period" in by_id[undated["id"]].components and "period" not in by_id[may["id"]].components
    by_id, _ = ask("what did the team ship")
    assert not any("period" in c.components for c in by_id.values())
    with db.session() as s:  # the time can be corrected later
        engine.update(s, tenant, march["id"], {"occurred_at": datetime(2023, 5, 30, tzinfo=UTC)})
    by_id, _ = ask("what did the team ship in May 2023")
    assert "period" in by_id[march["id"]].components


def test_occurred_filters_use_when_it_happened_and_apply_to_linked_memories(db, engine, tenant):
    march, _ = add(db, engine, tenant, "Ferry timetable changed for the spring", occurred_at=datetime(2023, 3, 14))
    may, _ = add(db, engine, tenant, "Ferry timetable changed for the summer", occurred_at=datetime(2023, 5, 9))
    undated, _ = add(db, engine, tenant, "Ferry timetable changed for the winter")  # happened when it was stored
    with db.session() as s:  # a reading-order link from May to March: the walk must not bring March back
        assert store.create_link(s, tenant, may["id"], march["id"], kind="next", weight=1.0)

    def found(**filters):
        return {c.id for c, _ in query(db, engine, tenant, "ferry timetable changed", min_score=0, **filters).matches}

    assert found() == {march["id"], may["id"], undated["id"]}
    may_only = {"occurred_after": datetime(2023, 5, 1), "occurred_before": datetime(2023, 5, 31, 23, 59)}
    assert found(**may_only) == {may["id"]}  # naive times are UTC
    assert found(occurred_before=datetime(2023, 4, 1, tzinfo=UTC)) == {march["id"]}
    assert found(occurred_after=datetime.now(UTC) - timedelta(hours=1)) == {undated["id"]}
    stored_today = datetime.now(UTC) - timedelta(hours=1)
    assert found(startTime=stored_today) == {march["id"], may["id"], undated["id"]}  # all were stored today
    with db.session() as s:
        rows, total = store.list_memories(
            s, tenant, offset=0, limit=10, where=store.MemoryFilter(occurred_before=datetime(2023, 4, 1, tzinfo=UTC))
        )
    assert total == 1 and [r["id"] for r in rows] == [march["id"]]
    with pytest.raises(ValueError, match="occurred_after is later than occurred_before"):
        QueryFilters(occurred_after=datetime(2023, 6, 1), occurred_before=datetime(2023, 5, 1))


def test_a_query_saying_yesterday_ranks_what_occurred_yesterday_first(db, engine, tenant, settings):
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    earlier, _ = add(db, engine, tenant, "Noa booked the ferry tickets", occurred_at=midnight - timedelta(days=4))
    yesterday, _ = add(db, engine, tenant, "Noa booked the ferry seats", occurred_at=midnight - timedelta(hours=12))
    outcome = query(db, engine, tenant, "what did Noa book yesterday", min_score=0)
    order = [c.id for c, _ in outcome.matches]
    by_id = {c.id: c for c, _ in outcome.matches}
    assert order[0] == yesterday["id"]
    assert by_id[yesterday["id"]].components["period"] == pytest.approx(settings.period_weight)
    assert "period" not in by_id[earlier["id"]].components
    outcome = query(db, engine, tenant, "what did Noa book 4 days ago", min_score=0)
    assert outcome.matches[0][0].id == earlier["id"]


def test_the_period_a_query_names_is_searched_on_its_own(db, tenant, settings):
    """A memory of the named period that shares no word with the query and is no near vector still ranks:
    the period's memories are compared with the query themselves, not only re-ranked if already found."""
    weighty = settings.model_copy(update={"period_weight": 1.0})  # what happened then outranks everything
    engine = MemoryEngine(weighty, SyntheticEmbedder(dim=384))
    for n in range(12):  # the words and the vector search fill their candidates (k 2 -> 8 each) with these
        add(db, engine, tenant, f"Harbour ferry note {n}: the ferry crossing schedule and ferry fares")
    then, _ = add(db, engine, tenant, "Signed the lease for the workshop", occurred_at=datetime(2023, 5, 9))
    add(db, engine, tenant, "Painted the workshop door", occurred_at=datetime(2022, 5, 9))  # May, not of 2023

    def ask(engine, q):
        with db.session() as s:
            return engine.query(s, tenant, q, k=2, filters=QueryFilters(min_score=0))

    outcome = ask(engine, "ferry crossing in May 2023")
    top = outcome.matches[0][0]
    assert top.id == then["id"] and top.period_rank == 1 and top.lexical_rank is None and top.dense_rank is None
    assert top.components["period"] == pytest.approx(1.0) and "period" in outcome.timings_ms
    assert len(outcome.matches) == 2 and outcome.matches[1][0].period_rank is None  # the only one of the period

    blind = MemoryEngine(weighty.model_copy(update={"period_scan_limit": 0}), SyntheticEmbedder(dim=384))
    assert then["id"] not in {c.id for c, _ in ask(blind, "ferry crossing in May 2023").matches}  # re-ranking alone
    outcome = ask(engine, "ferry crossing in May")  # every May: unbounded, not searched on its own
    assert then["id"] not in {c.id for c, _ in outcome.matches} and "period" not in outcome.timings_ms
