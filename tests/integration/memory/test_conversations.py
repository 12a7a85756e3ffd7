"""Adds that name a conversation in their metadata (`session_id`, `thread_id`, ...) are linked in order, as if
each had said `follows`; one head row per conversation, locked by the add (real PostgreSQL)."""

from __future__ import annotations

import threading
import time
import uuid

import numpy as np
import pytest
from sqlalchemy import text

from shared.api.memories import MemoryCreate
from shared.embedding.synthetic import SyntheticEmbedder
from shared.memory.engine import MemoryEngine
from tests.integration.helpers import add, embedded_after, stored_vector

pytestmark = pytest.mark.integration

TURNS = ["Ivo: where did you park the camper van?", "Lea: behind the old mill", "Ivo: by the river?"]


def next_links(db, tenant: str) -> set[tuple[uuid.UUID, uuid.UUID]]:
    with db.session(tenant) as s:
        rows = s.execute(
            text("SELECT src_id, dst_id FROM waypoints WHERE user_id = :u AND kind = 'next'"), {"u": tenant}
        ).all()
    return {(r.src_id, r.dst_id) for r in rows}


def add_turns(db, engine, tenant: str, contents: list[str], **metadata) -> list[uuid.UUID]:
    return [add(db, engine, tenant, content, metadata=dict(metadata))[0]["id"] for content in contents]


def test_turns_of_one_session_are_linked_in_order_and_embedded_after_the_turns_before(db, engine, tenant):
    ids = add_turns(db, engine, tenant, TURNS, session_id="s-1")
    assert next_links(db, tenant) == {(ids[0], ids[1]), (ids[1], ids[2])}
    np.testing.assert_allclose(stored_vector(db, ids[0]), engine.embedder.embed([TURNS[0]])[0], atol=1e-6)
    np.testing.assert_allclose(stored_vector(db, ids[1]), embedded_after(engine, TURNS[1], TURNS[0]), atol=1e-6)
    expected = embedded_after(engine, TURNS[2], f"{TURNS[0]} {TURNS[1]}")
    np.testing.assert_allclose(stored_vector(db, ids[2]), expected, atol=1e-6)
    with db.session() as s:
        assert engine.stored_contexts(s, tenant, ids) == ["", TURNS[0], "\n".join(TURNS[:2])]


@pytest.mark.parametrize("name", ["thread_id", "conversation_id", "run_id"])
def test_every_conversation_key_links_and_an_integer_value_too(db, engine, tenant, name):
    ids = add_turns(db, engine, tenant, TURNS[:2], **{name: 7})
    assert next_links(db, tenant) == {(ids[0], ids[1])}


def test_different_conversations_tenants_and_key_names_stay_apart(db, engine, tenant):
    a1 = add(db, engine, tenant, "Ana: shall we take the night train?", metadata={"session_id": "a"})[0]["id"]
    b1 = add(db, engine, tenant, "Ben: the report is due Friday", metadata={"session_id": "b"})[0]["id"]
    a2 = add(db, engine, tenant, "Ana: the sleeper leaves at ten", metadata={"session_id": "a"})[0]["id"]
    same_value = add(db, engine, tenant, "Cy: thread a, not session a", metadata={"thread_id": "a"})[0]["id"]
    b2 = add(db, engine, tenant, "Ben: and the slides on Monday", metadata={"session_id": "b"})[0]["id"]
    other = f"{tenant}-other"
    elsewhere = add(db, engine, other, "Dee: another tenant's session a", metadata={"session_id": "a"})[0]["id"]
    assert next_links(db, tenant) == {(a1, a2), (b1, b2)}
    assert same_value not in {i for pair in next_links(db, tenant) for i in pair}
    assert next_links(db, other) == set() and elsewhere


@pytest.mark.parametrize(
    "metadata",
    [{}, {"namespace": "n"}, {"graph_id": "g"}, {"user_id": "u", "agent_id": "a", "app_id": "p"}, {"session_id": ""}],
)
def test_without_a_conversation_key_nothing_is_linked(db, engine, tenant, metadata):
    ids = add_turns(db, engine, tenant, TURNS, **metadata)
    assert next_links(db, tenant) == set()
    with db.session() as s:
        assert engine.stored_contexts(s, tenant, ids) == ["", "", ""]
        heads = s.execute(text("SELECT count(*) FROM conversation_heads WHERE user_id = :u"), {"u": tenant})
        assert heads.scalar_one() == 0


def test_an_explicit_follows_wins_and_moves_the_conversation_on(db, engine, tenant):
    a, b = add_turns(db, engine, tenant, TURNS[:2], session_id="s")
    with db.session() as s:
        turn = MemoryCreate(content="Ivo: and the keys?", metadata={"session_id": "s"})
        c, _ = engine.add(s, tenant, turn, follows=a)
    d = add(db, engine, tenant, "Lea: under the mat", metadata={"session_id": "s"})[0]["id"]
    assert next_links(db, tenant) == {(a, b), (a, c["id"]), (c["id"], d)}
    with db.session() as s:  # d walks back along the latest link into c: c's context is a, not b
        assert engine.stored_contexts(s, tenant, [d]) == [f"{TURNS[0]}\nIvo: and the keys?"]


def test_a_duplicate_is_not_linked_and_leaves_the_conversation_where_it_was(db, engine, tenant):
    a, b = add_turns(db, engine, tenant, TURNS[:2], session_id="s")
    again, dedup = add(db, engine, tenant, TURNS[0], metadata={"session_id": "s"})
    assert dedup and again["id"] == a
    c = add(db, engine, tenant, TURNS[2], metadata={"session_id": "s"})[0]["id"]
    assert next_links(db, tenant) == {(a, b), (b, c)}


def test_a_deleted_head_starts_the_conversation_afresh(db, engine, tenant):
    (a,) = add_turns(db, engine, tenant, TURNS[:1], session_id="s")
    with db.session() as s:
        assert engine.delete(s, tenant, a)
    b, c = add_turns(db, engine, tenant, TURNS[1:], session_id="s")
    assert next_links(db, tenant) == {(b, c)}
    with db.session() as s:
        assert engine.stored_contexts(s, tenant, [b, c]) == ["", TURNS[1]]


def test_two_adds_of_one_conversation_at_once_are_linked_one_after_the_other(db, engine, tenant):
    (first,) = add_turns(db, engine, tenant, TURNS[:1], session_id="s")
    added: dict[str, uuid.UUID] = {}
    failed: list[BaseException] = []

    def second_add() -> None:
        try:
            added["late"] = add(db, engine, tenant, TURNS[2], metadata={"session_id": "s"})[0]["id"]
        except BaseException as error:  # reported by the assertion below
            failed.append(error)

    with db.session() as s:  # the first add holds its conversation until it commits
        early, _ = engine.add(s, tenant, MemoryCreate(content=TURNS[1], metadata={"session_id": "s"}))
        waiter = threading.Thread(target=second_add)
        waiter.start()
        time.sleep(0.5)
        assert waiter.is_alive(), "the second add did not wait for the first"
    waiter.join(timeout=30)
    assert not failed and not waiter.is_alive()
    assert next_links(db, tenant) == {(first, early["id"]), (early["id"], added["late"])}


def test_a_metadata_timestamp_becomes_when_the_memory_occurred(db, engine, tenant):
    memory, _ = add(db, engine, tenant, "Lea: see you at seven", metadata={"timestamp": "2023-05-08T13:56:00"})
    assert memory["occurred_at"].isoformat() == "2023-05-08T13:56:00+00:00"
    assert memory["metadata"] == {"timestamp": "2023-05-08T13:56:00"}


class _PoolWatcher(SyntheticEmbedder):
    """The synthetic model, noting how many of the app role's pooled connections are out while it runs."""

    def __init__(self, pool) -> None:
        super().__init__(dim=384)
        self.pool = pool
        self.seen: list[int] = []

    def embed(self, texts):
        self.seen.append(self.pool.checkedout())
        return super().embed(texts)

    def embed_in_context(self, texts, contexts):
        self.seen.append(self.pool.checkedout())
        return super().embed_in_context(texts, contexts)


def test_an_add_of_a_conversation_holds_no_connection_while_it_embeds(app_db, settings, tenant):
    # Each add reads the conversation's last turn and what it follows first: on a short session of its own, as the
    # gateway's routes pass it, so that a slow model never holds a pooled connection (and a second tenant's 503).
    watcher = _PoolWatcher(app_db.engine.pool)
    engine = MemoryEngine(settings, watcher)
    db = app_db.bound(tenant)
    ids = []
    for turn in TURNS:
        before = app_db.engine.pool.checkedout()
        with db.session() as session:
            memory, _ = engine.add(
                session, tenant, MemoryCreate(content=turn, metadata={"session_id": "s"}), reading=db.reading
            )
        ids.append(memory["id"])
        assert watcher.seen[-1] == before
    assert next_links(db, tenant) == {(ids[0], ids[1]), (ids[1], ids[2])}
    with db.session() as session:  # read through the add's own session, as before: its connection is held
        engine.add(session, tenant, MemoryCreate(content="Lea: yes, the river", metadata={"session_id": "s"}))
        assert watcher.seen[-1] == before + 1


def test_an_update_embeds_itself_and_the_turns_after_it_with_no_connection_held(app_db, settings, tenant):
    watcher = _PoolWatcher(app_db.engine.pool)
    engine = MemoryEngine(settings, watcher)
    db = app_db.bound(tenant)
    ids = add_turns(db, engine, tenant, TURNS, session_id="s")
    before = app_db.engine.pool.checkedout()
    watcher.seen.clear()
    edited = "Lea: behind the new bakery"
    with db.session() as session:
        engine.update(session, tenant, ids[1], {"content": edited}, reading=db.reading)
    assert watcher.seen and set(watcher.seen) == {before}  # the memory itself, then the turn after it
    # the turn after the edit is embedded after the new text, as a fresh add of the same turns would be
    np.testing.assert_allclose(
        stored_vector(db, ids[2]), embedded_after(engine, TURNS[2], f"{TURNS[0]} {edited}"), atol=1e-6
    )
