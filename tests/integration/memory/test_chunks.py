"""A job's chunks stored exactly once: the fresh tier, its merge, sequences."""

from __future__ import annotations

import time

import numpy as np
import pytest
from sqlalchemy import text

from shared.jobs import ChunkSpec
from shared.memory.chunks import store_chunk
from shared.storage import jobs as job_store
from shared.storage import leases
from tests.integration.helpers import documents, embedded_after, item, query, stored_vector, term_df

pytestmark = pytest.mark.integration


def test_batch_chunk_is_stored_exactly_once(db, engine, tenant):
    items = [{"content": f"Batch fact number {i} about the warehouse"} for i in range(30)]
    items.append({"content": "Batch fact number 0 about the warehouse"})  # a duplicate inside the batch
    with db.session() as s:
        job_id, created = job_store.create_job(
            s, user_id=tenant, kind="batch", total=len(items), params={}, idempotency_key=None
        )
        job_store.add_chunks(s, job_id, [ChunkSpec(0, "semantic", items)])
    assert created
    owner = leases.owner_token()
    for _ in range(2):  # the second run is a redelivery
        with db.session() as s:
            leases.claim_chunk(s, job_id, 0, owner=owner, ttl=20)
        with db.session() as s:
            store_chunk(engine, s, job_id, 0, owner)
    with db.session() as s:
        count = s.execute(text("SELECT count(*) FROM memories WHERE user_id = :u"), {"u": tenant}).scalar_one()
        job = job_store.get_job(s, job_id)
        totals = job_store.chunk_totals(s, job_id)
    assert count == 30
    assert job is not None and job["status"] == "succeeded" and job["progress_done"] == len(items)
    assert {k: totals.pop(k) for k in ("created", "duplicates")} == {"created": 30, "duplicates": 1}
    assert set(totals) == {"embed_ms", "store_ms", "work_ms"}  # where the chunk's time went (the redelivery adds none)
    assert totals["work_ms"] >= max(totals["embed_ms"], totals["store_ms"])


def test_a_chunk_is_marked_done_when_it_is_done_not_when_its_transaction_began(db, engine, tenant):
    with db.session() as s:
        job_id, _ = job_store.create_job(s, user_id=tenant, kind="batch", total=3, params={}, idempotency_key=None)
        items = [{"content": f"Dock {i} is open"} for i in range(3)]
        job_store.add_chunks(s, job_id, [ChunkSpec(0, "semantic", items)])
    with db.session() as s:
        began = s.execute(text("SELECT now()")).scalar_one()  # the transaction's start, as the worker's
        time.sleep(0.05)
        store_chunk(engine, s, job_id, 0)
    with db.session() as s:
        done_at = s.execute(
            text("SELECT done_at FROM job_chunks WHERE job_id = :j AND seq = 0"), {"j": job_id}
        ).scalar_one()
    assert (done_at - began).total_seconds() >= 0.05  # the broker wait and worker time of bench.ingest need it


def test_bulk_memories_are_queryable_at_once_and_merge_into_the_index(db, engine, tenant, retriever):
    near = ["Ferry to Harwich departs at 07:15 from pier 2", "Ferry to Harwich departs at 07:15 from pier two"]
    items = [{"content": c} for c in near] + [{"content": f"Container {i} cleared customs"} for i in range(40)]
    with db.session() as s:
        job_id, _ = job_store.create_job(
            s, user_id=tenant, kind="batch", total=len(items), params={}, idempotency_key=None
        )
        job_store.add_chunks(s, job_id, [ChunkSpec(0, "semantic", items)])
    with db.session() as s:
        store_chunk(engine, s, job_id, 0)
    with db.session() as s:
        fresh = s.execute(
            text("SELECT count(*) FROM memory_vectors WHERE user_id = :u AND NOT indexed"), {"u": tenant}
        ).scalar_one()
    assert fresh >= len(items)  # landed in the fresh tier, not yet in HNSW
    before = query(db, retriever, tenant, "ferry Harwich pier")
    assert before.matches[0][1]["content"] in near
    assert before.matches[0][0].dense_rank is not None  # found by the exact scan of the fresh tier

    def fresh_left() -> int:
        with db.session() as s:
            return s.execute(
                text("SELECT count(*) FROM memory_vectors WHERE user_id = :u AND NOT indexed"), {"u": tenant}
            ).scalar_one()

    # Small batches: several rounds. A worker's merge (store-wide) may hold some rows meanwhile: ours skips
    # them (SKIP LOCKED) and theirs indexes them, so wait for none to be left rather than for a round of 0.
    deadline = time.monotonic() + 60
    while fresh_left() and time.monotonic() < deadline:
        with db.session() as s:
            moved, _ = engine.merge_fresh(s, limit=7)
        if moved == 0:
            time.sleep(0.1)
    with db.session() as s:
        links = s.execute(text("SELECT count(*) FROM waypoints WHERE user_id = :u"), {"u": tenant}).scalar_one()
    assert fresh_left() == 0
    assert links >= 1  # the two ferry notes linked when they settled
    after = query(db, retriever, tenant, "ferry Harwich pier")
    assert after.matches[0][1]["content"] in near and after.matches[0][0].dense_rank is not None


def test_bulk_memories_are_counted_once_when_they_are_stored(db, engine, tenant, retriever):
    items = [{"content": f"Lighthouse keeper log entry {i}"} for i in range(12)]
    with db.session() as s:
        job_id, _ = job_store.create_job(s, user_id=tenant, kind="batch", total=12, params={}, idempotency_key=None)
        job_store.add_chunks(s, job_id, [ChunkSpec(0, "semantic", items)])
    for _ in range(2):  # delivered twice: stored, and counted, once
        with db.session() as s:
            store_chunk(engine, s, job_id, 0)
    assert term_df(db, tenant, "lighthous") == 12 and documents(db, tenant) == 12  # fresh, and counted
    assert query(db, retriever, tenant, "lighthouse keeper").matches
    for _ in range(3):  # merging counts nothing again
        with db.session() as s:
            engine.merge_fresh(s, limit=100_000)
    assert term_df(db, tenant, "lighthous") == 12 and documents(db, tenant) == 12


def test_a_sequence_batch_links_its_items_in_order_across_sector_chunks_once(db, engine, tenant):
    turns = ["Ana: shall we book the Lisbon flat?", "Ben: I feel so happy about it!", "Ana: booked, 3 nights"]
    chunks = [  # the gateway routes items by sector: order survives only in each item's position
        ChunkSpec(0, "episodic", [item(turns[0], position=0), item(turns[2], position=2)]),
        # the last item says the first again: one memory, kept at its first place (no link back to the start)
        ChunkSpec(1, "emotional", [item(turns[1], position=1), item(turns[0], position=3)]),
    ]
    with db.session() as s:
        job_id, _ = job_store.create_job(
            s, user_id=tenant, kind="batch", total=4, params={"sequence": True}, idempotency_key=None
        )
        job_store.add_chunks(s, job_id, chunks)
    for seq in (1, 0, 1, 0):  # out of order, each delivered twice
        with db.session() as s:
            store_chunk(engine, s, job_id, seq)
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
            [ChunkSpec(0, "episodic", [item(turns[2], position=0), item("Ben: great", position=1)])],
        )
    with db.session() as s:
        store_chunk(engine, s, again, 0)
        assert job_store.get_job(s, again)["result"]["next_links"] == 0


def test_a_sequence_chunk_embeds_each_item_after_the_context_the_gateway_gave_it(db, engine, tenant):
    items = [
        item("Ana: shall we book the Lisbon flat?", position=0),
        item("Ben: yes, three nights", position=1, context="Ana: shall we book the Lisbon flat?"),
    ]
    with db.session() as s:
        job_id, _ = job_store.create_job(
            s, user_id=tenant, kind="batch", total=2, params={"sequence": True}, idempotency_key=None
        )
        job_store.add_chunks(s, job_id, [ChunkSpec(0, "episodic", items)])
    with db.session() as s:
        store_chunk(engine, s, job_id, 0)
    with db.session() as s:
        rows = s.execute(text("SELECT id, content, meta FROM memories WHERE user_id = :u"), {"u": tenant}).all()
    by_content = {r.content: r for r in rows}
    reply = stored_vector(db, by_content["Ben: yes, three nights"].id)
    np.testing.assert_allclose(
        reply, embedded_after(engine, "Ben: yes, three nights", "Ana: shall we book the Lisbon flat?"), atol=1e-6
    )
    question = stored_vector(db, by_content["Ana: shall we book the Lisbon flat?"].id)
    np.testing.assert_allclose(question, engine.embedder.embed(["Ana: shall we book the Lisbon flat?"])[0], atol=1e-6)
    assert all(r.meta == {} for r in rows)  # the context is not kept as the memory's metadata

    with db.session() as s:  # an edit re-embeds the reply after it, which stays in the fresh tier for its merge
        engine.update(s, tenant, by_content["Ana: shall we book the Lisbon flat?"].id, {"content": "Ana: Porto?"})
        fresh = s.execute(
            text("SELECT bool_and(NOT indexed) FROM memory_vectors WHERE memory_id = :id"),
            {"id": by_content["Ben: yes, three nights"].id},
        ).scalar_one()
    assert fresh is True
    reply = stored_vector(db, by_content["Ben: yes, three nights"].id)
    np.testing.assert_allclose(reply, embedded_after(engine, "Ben: yes, three nights", "Ana: Porto?"), atol=1e-6)
