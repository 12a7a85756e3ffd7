"""One memory per fact, on the write paths and a real database: a text that says what a memory of the tenant says
in other case, punctuation or order of parts is that memory (deduplicated, its history keeping the merged text),
once however often its chunk is delivered and however many writers send it at once; a near miss is stored; off
with a setting; an edit cannot make a second memory of one fact."""

from __future__ import annotations

import threading
import uuid

import pytest
from sqlalchemy import text

from shared.api.memories import MemoryCreate
from shared.embedding.factory import create_embedder
from shared.errors import Conflict
from shared.jobs import ChunkSpec
from shared.memory.chunks import store_chunk
from shared.memory.engine import MemoryEngine
from shared.storage import jobs as job_store
from shared.storage import versions as version_store
from tests.integration.helpers import item

pytestmark = pytest.mark.integration

FACT = "Alice likes green tea in the morning."
SAME = ["In the morning Alice likes green tea.", "alice likes green tea in the morning"]
OTHERS = ["Alice likes green tea in the evening.", "Alice likes green tea in the morning with honey."]


def add(db, engine, tenant: str, content: str, **fields) -> tuple[dict, bool]:
    with db.session() as s:
        return engine.add(s, tenant, MemoryCreate(content=content, **fields))


def contents(db, tenant: str) -> list[str]:
    with db.session() as s:
        rows = s.execute(text("SELECT content FROM memories WHERE user_id = :u ORDER BY created_at"), {"u": tenant})
        return list(rows.scalars())


def merges(db, tenant: str, memory_id: uuid.UUID) -> list[tuple[str | None, dict]]:
    with db.session() as s:
        return [(c.content, c.detail) for c in version_store.history(s, tenant, memory_id) if c.event == "merged"]


def test_phrasings_of_one_fact_are_one_memory_and_its_history_keeps_them(db, engine, tenant):
    kept, deduplicated = add(db, engine, tenant, FACT, tags=["tea"])
    assert not deduplicated
    for phrasing in SAME:
        again, deduplicated = add(db, engine, tenant, phrasing, tags=["drinks"], metadata={"source": "chat"})
        assert deduplicated and again["id"] == kept["id"]
        assert again["content"] == FACT and again["tags"] == ["tea"]  # the kept memory keeps its own labels
    assert merges(db, tenant, kept["id"]) == [
        (phrasing, {"by": "write", "tags": ["drinks"], "metadata": {"source": "chat"}}) for phrasing in SAME
    ]
    again, deduplicated = add(db, engine, tenant, FACT)  # the same text: an exact duplicate, no history
    assert deduplicated and again["id"] == kept["id"] and len(merges(db, tenant, kept["id"])) == 2


def test_a_near_miss_or_a_text_that_adds_something_is_stored(db, engine, tenant):
    add(db, engine, tenant, FACT)
    for other in OTHERS:
        assert not add(db, engine, tenant, other)[1]
    assert contents(db, tenant) == [FACT, *OTHERS]


def test_a_batch_chunk_merges_once_however_often_it_is_delivered(db, engine, tenant):
    items = [item(FACT), item(SAME[0]), item(OTHERS[0]), item(SAME[1])]
    with db.session() as s:
        job_id, _ = job_store.create_job(
            s, user_id=tenant, kind="batch", total=len(items), params={}, idempotency_key=None
        )
        job_store.add_chunks(s, job_id, [ChunkSpec(0, "semantic", items)])
    for _ in range(2):  # the second run is a redelivery
        with db.session() as s:
            store_chunk(engine, s, job_id, 0)
    assert sorted(contents(db, tenant)) == sorted([FACT, OTHERS[0]])
    with db.session() as s:
        kept = s.execute(text("SELECT id FROM memories WHERE user_id = :u AND content = :c"), {"u": tenant, "c": FACT})
        kept_id = kept.scalar_one()
    assert [content for content, _ in merges(db, tenant, kept_id)] == SAME


def test_two_writers_at_once_make_one_memory(app_db, engine, tenant):
    start = threading.Barrier(2)
    results: list[tuple[dict, bool]] = []

    def write(content: str) -> None:
        start.wait()
        results.append(add(app_db.bound(tenant), engine, tenant, content))

    threads = [threading.Thread(target=write, args=(c,)) for c in (FACT, SAME[0])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 2 and len({row["id"] for row, _ in results}) == 1
    assert sorted(deduplicated for _, deduplicated in results) == [False, True]
    assert len(contents(app_db.bound(tenant), tenant)) == 1


def test_an_edit_cannot_make_a_second_memory_of_one_fact(db, engine, tenant):
    kept, _ = add(db, engine, tenant, FACT)
    other, _ = add(db, engine, tenant, OTHERS[0])
    with db.session() as s, pytest.raises(Conflict, match=str(kept["id"])):
        engine.update(s, tenant, other["id"], {"content": SAME[0]})


def test_off_with_a_setting(settings, app_db, tenant):
    engine = MemoryEngine(settings.model_copy(update={"dedup_facts": False}), create_embedder(settings))
    db = app_db.bound(tenant)
    for phrasing in [FACT, *SAME]:
        assert not add(db, engine, tenant, phrasing)[1]
    assert contents(db, tenant) == [FACT, *SAME]
