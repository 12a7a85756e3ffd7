"""The write path against real PostgreSQL + pgvector: classify, embed, store, link, update."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from sqlalchemy import text

from shared.api.memories import MemoryCreate
from shared.embedding import SyntheticEmbedder
from shared.errors import Conflict, NotFound
from shared.memory.sectors import SECTOR_CONFIGS
from shared.storage import waypoints as waypoint_store
from tests.integration.helpers import add, embedded_after, stored_vector

pytestmark = pytest.mark.integration


def test_add_classifies_embeds_and_stores_a_vector_per_sector(db, engine, tenant):
    memory, dedup = add(db, engine, tenant, "I feel so happy and excited about the trip today", tags=["trip"])
    assert not dedup
    assert memory["primary_sector"] in SECTOR_CONFIGS
    assert memory["decay_lambda"] == pytest.approx(SECTOR_CONFIGS[memory["primary_sector"]].decay_lambda)
    expected_salience = min(1.0, 0.4 + 0.1 * (len(memory["sectors"]) - 1))
    assert memory["salience"] == pytest.approx(expected_salience)
    with db.session() as s:
        rows = s.execute(
            text("SELECT sector, dim, walked FROM memory_vectors WHERE memory_id = :id"),
            {"id": memory["id"]},
        ).all()
    assert sorted(r.sector for r in rows) == sorted(memory["sectors"])
    # one vector shared by every sector (simple mode): walked once, in the primary sector's row
    assert [r.sector for r in rows if r.walked] == [memory["primary_sector"]]
    assert {r.dim for r in rows} == {engine.embedder.dim}


def test_same_content_twice_returns_the_existing_memory(db, engine, tenant):
    first, _ = add(db, engine, tenant, "The deploy key lives in the vault under ops/deploy")
    again, dedup = add(db, engine, tenant, "  The deploy key lives in the vault   under ops/deploy \n")
    assert dedup and again["id"] == first["id"]
    other_case, dedup_case = add(db, engine, tenant, "the deploy key lives in the vault under ops/deploy")
    assert dedup_case and other_case["id"] == first["id"]  # one fact in other case (MNEMOFLOW_DEDUP_FACTS)
    other_path, dedup_path = add(db, engine, tenant, "The deploy key lives in the vault under ops/deploy-prod")
    assert not dedup_path and other_path["id"] != first["id"]  # a word changed: another fact
    with db.session() as s:
        count = s.execute(text("SELECT count(*) FROM memories WHERE user_id = :u"), {"u": tenant}).scalar_one()
    assert count == 2


def test_distinct_short_memories_are_never_merged(db, engine, tenant):
    # OpenMemory's simhash dedup dropped many of these; the fact key must keep every distinct one.
    contents = [f"User likes colour number {i}" for i in range(60)] + ["cats", "cat", "dogs", "cats and dogs"]
    added = [add(db, engine, tenant, c) for c in contents]
    assert not any(dedup for _, dedup in added)
    again, dedup = add(db, engine, tenant, "Cats")  # the same word in other case is the same memory
    assert dedup and again["id"] == added[60][0]["id"]
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


def test_a_store_refuses_vectors_from_another_model(db, settings):
    from shared.db import schema_session
    from shared.embedding.local import LocalOnnxEmbedder
    from shared.storage.sector_models import ensure_store_model

    # what a process does at start-up, as the owner (it may have to index a dimension)
    with schema_session(settings, "mnemoflow.tests.start") as s:
        ensure_store_model(s, SyntheticEmbedder(dim=384))  # the test store is a synthetic one
    for other in (SyntheticEmbedder(dim=256), LocalOnnxEmbedder()):
        with pytest.raises(Conflict, match="MNEMOFLOW_EMBEDDING_PROVIDER=synthetic"), db.session() as s:
            ensure_store_model(s, other)
    with db.session() as s:
        rows = s.execute(text("SELECT DISTINCT model, dim FROM sector_models")).all()
    assert rows == [("synthetic-hash-v1", 384)]


def test_a_turn_is_embedded_after_the_turns_it_follows(db, engine, tenant, settings):
    turns = ["Ivo: where did you park the camper van?", "Lea: behind the old mill", "Ivo: by the river?", "Lea: yes"]
    ids: list[uuid.UUID] = []
    for turn in turns:
        with db.session() as s:
            memory, _ = engine.add(s, tenant, MemoryCreate(content=turn), follows=ids[-1] if ids else None)
        ids.append(memory["id"])
    assert engine.settings.embed_context_turns == 2
    np.testing.assert_allclose(stored_vector(db, ids[0]), engine.embedder.embed([turns[0]])[0], atol=1e-6)
    np.testing.assert_allclose(stored_vector(db, ids[1]), embedded_after(engine, turns[1], turns[0]), atol=1e-6)
    for i in (2, 3):  # the two turns before it, oldest first
        expected = embedded_after(engine, turns[i], f"{turns[i - 2]} {turns[i - 1]}")
        np.testing.assert_allclose(stored_vector(db, ids[i]), expected, atol=1e-6)
    with db.session() as s:  # what is stored is what a later re-embed or regeneration reads back
        assert engine.stored_contexts(s, tenant, ids) == ["", turns[0], "\n".join(turns[:2]), "\n".join(turns[1:3])]
        assert engine.stored_contexts(s, f"{tenant}-other", ids) == ["", "", "", ""]  # tenants stay apart
    before_edit = [stored_vector(db, i) for i in ids]
    with db.session() as s:  # new content is embedded after the same turns, and the turn after it again
        engine.update(s, tenant, ids[2], {"content": "Ivo: near the river bank?"})
    expected = embedded_after(engine, "Ivo: near the river bank?", f"{turns[0]} {turns[1]}")
    np.testing.assert_allclose(stored_vector(db, ids[2]), expected, atol=1e-6)
    expected = embedded_after(engine, turns[3], f"{turns[1]} Ivo: near the river bank?")
    np.testing.assert_allclose(stored_vector(db, ids[3]), expected, atol=1e-6)
    assert not np.allclose(before_edit[3], expected, atol=1e-3)
    for i in (0, 1):  # the turns before it are untouched
        np.testing.assert_array_equal(stored_vector(db, ids[i]), before_edit[i])


def test_walking_back_a_loop_of_next_links_stops_after_the_turns_asked_for(db, engine, tenant):
    a, _ = add(db, engine, tenant, "Ana: ping")
    b, _ = add(db, engine, tenant, "Ben: pong")
    with db.session() as s:
        waypoint_store.link_in_order(s, tenant, [a["id"], b["id"], a["id"]])
        before = waypoint_store.preceding_contents(s, tenant, [a["id"]], turns=5)
    # a <- b <- a <- b <- a <- b: five turns back, oldest first, and no further
    assert before == {a["id"]: ["Ben: pong", "Ana: ping", "Ben: pong", "Ana: ping", "Ben: pong"]}
