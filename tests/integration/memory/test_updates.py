"""Updates found at write time, on every write path: a memory that says a fact changed supersedes the statement it
updates (status, `valid_to`, a `supersedes` waypoint, both histories), once however often its chunk is delivered;
a backdated add, another speaker's fact and plain news supersede nothing. With the shipped local model (the
decision reads meaning), in a store of its own."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import text

from shared.api.memories import MemoryCreate
from shared.config import Settings
from shared.embedding.factory import create_embedder
from shared.jobs import ChunkSpec
from shared.memory.chunks import store_chunk
from shared.memory.engine import MemoryEngine
from shared.storage import jobs as job_store
from shared.storage import versions as version_store
from tests.integration.helpers import item

pytestmark = pytest.mark.integration

FILLER = (
    "It rained the whole afternoon, so we stayed in and watched a documentary about octopuses.",
    "I tried a new recipe for lentil soup and it turned out surprisingly good.",
    "We spent Saturday morning at the farmers market buying strawberries.",
    "The neighbours are renovating their kitchen and the drilling starts at eight.",
)
OLD = "I write all my notes in Evernote."
NEW = "I moved all my notes from Evernote to Obsidian."


def at(month: int) -> datetime:
    return datetime(2026, month, 1, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def store(make_store, servers):
    url, database = make_store("updates")
    settings = Settings(database_url=url, redis_url=servers["redis_url"], embedding_provider="local")
    return database, MemoryEngine(settings, create_embedder(settings))


@pytest.fixture
def tenant_db(store):
    database, engine = store
    tenant = f"u{uuid.uuid4().hex[:10]}"
    return database.bound(tenant), engine, tenant


def add(db, engine, tenant: str, content: str, when: datetime, **metadata) -> uuid.UUID:
    with db.session() as s:
        row, _ = engine.add(s, tenant, MemoryCreate(content=content, occurred_at=when, metadata=metadata))
    return row["id"]


def state(db, tenant: str, memory_id: uuid.UUID) -> tuple[str, datetime | None]:
    with db.session() as s:
        row = s.execute(
            text("SELECT status, valid_to FROM memories WHERE id = :id AND user_id = :u"),
            {"id": memory_id, "u": tenant},
        ).one()
    return row.status, row.valid_to


def supersessions(db, tenant: str) -> list[tuple[str, str]]:
    with db.session() as s:
        rows = s.execute(
            text(
                "SELECT n.content AS newer, o.content AS older FROM waypoints w JOIN memories n ON n.id = w.src_id "
                "JOIN memories o ON o.id = w.dst_id WHERE w.user_id = :u AND w.kind = 'supersedes'"
            ),
            {"u": tenant},
        ).all()
    return [(r.newer, r.older) for r in rows]


def test_an_add_that_says_the_fact_changed_supersedes_the_statement_it_updates(tenant_db):
    db, engine, tenant = tenant_db
    old = add(db, engine, tenant, OLD, at(1))
    for n, filler in enumerate(FILLER):
        add(db, engine, tenant, filler, at(2 + n % 2))
    new = add(db, engine, tenant, NEW, at(5))
    assert state(db, tenant, old) == ("superseded", at(5))
    assert state(db, tenant, new) == ("active", None)
    with db.session() as s:
        change = version_store.history(s, tenant, old)[-1]
    assert (change.event, change.other_id, change.detail["by"]) == ("superseded", new, "write")
    assert change.detail["cue"] and change.detail["similarity"] >= engine.updates.min_similarity


def test_a_backdated_add_another_speakers_fact_and_news_supersede_nothing(tenant_db):
    db, engine, tenant = tenant_db
    add(db, engine, tenant, OLD, at(6))
    add(db, engine, tenant, NEW, at(2))  # about a time before the statement it would replace
    add(db, engine, tenant, "Ana: I live in a small flat in Paris.", at(1))
    add(db, engine, tenant, "Ben: We finally moved to Berlin last month.", at(3))
    add(db, engine, tenant, "I take cetirizine for my hay fever.", at(1))
    add(db, engine, tenant, "I picked up more cetirizine at the pharmacy today.", at(3))  # news, no change
    assert supersessions(db, tenant) == []


def test_a_batch_chunk_supersedes_once_however_often_it_is_delivered(tenant_db):
    db, engine, tenant = tenant_db
    items = [item(OLD, occurred_at=at(1)), *(item(f, occurred_at=at(2)) for f in FILLER), item(NEW, occurred_at=at(4))]
    with db.session() as s:
        job_id, _ = job_store.create_job(
            s, user_id=tenant, kind="batch", total=len(items), params={}, idempotency_key=None
        )
        job_store.add_chunks(s, job_id, [ChunkSpec(0, "semantic", items)])
    for _ in range(2):  # the second run is a redelivery
        with db.session() as s:
            store_chunk(engine, s, job_id, 0)
    assert supersessions(db, tenant) == [(NEW, OLD)]
    with db.session() as s:
        old = s.execute(text("SELECT id FROM memories WHERE content = :c AND user_id = :u"), {"c": OLD, "u": tenant})
        changes = version_store.history(s, tenant, old.scalar_one())
    assert [c.event for c in changes] == ["superseded"]


def test_a_sequence_supersedes_an_earlier_turn_of_a_stored_conversation(tenant_db):
    db, engine, tenant = tenant_db
    old = add(db, engine, tenant, "I drive an old 2012 Honda Civic to work.", at(1), session_id="s1")
    for filler in FILLER:
        add(db, engine, tenant, filler, at(1), session_id="s1")
    turns = ["We cleared out the garage on Sunday.", "Sold the Civic last weekend; I'm driving a Tesla Model 3 now."]
    with db.session() as s:
        job_id, _ = job_store.create_job(
            s, user_id=tenant, kind="batch", total=2, params={"sequence": True}, idempotency_key=None
        )
        chunk = [item(t, position=i, occurred_at=at(3)) for i, t in enumerate(turns)]
        job_store.add_chunks(s, job_id, [ChunkSpec(0, "episodic", chunk)])
    with db.session() as s:
        store_chunk(engine, s, job_id, 0)
    assert state(db, tenant, old)[0] == "superseded"
    assert supersessions(db, tenant) == [(turns[1], "I drive an old 2012 Honda Civic to work.")]


def test_off_with_a_setting(store, make_store, servers):
    url, database = make_store("updates_off")
    settings = Settings(
        database_url=url, redis_url=servers["redis_url"], embedding_provider="local", update_detection=False
    )
    engine = MemoryEngine(settings, create_embedder(settings))
    db = database.bound("off")
    add(db, engine, "off", OLD, at(1))
    add(db, engine, "off", NEW, at(2))
    assert supersessions(db, "off") == []
