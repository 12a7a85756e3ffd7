"""Re-embedding a store on real PostgreSQL: planning, exactly-once chunks, late writers, the switch and its lock."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
from sqlalchemy import text

from shared.api.memories import MemoryCreate
from shared.api.query import QueryFilters
from shared.embedding import reembed
from shared.embedding.synthetic import SyntheticEmbedder
from shared.errors import Conflict
from shared.memory.engine import MemoryEngine
from shared.memory.sectors import SECTORS
from shared.model.embedders import StoreModel
from shared.retrieval.service import Retriever
from shared.storage.sector_models import current_models, guard_store_model
from shared.tenancy import DbRole
from tests.integration.helpers import search

pytestmark = pytest.mark.integration

OLD = SyntheticEmbedder(dim=384)
NEW = SyntheticEmbedder(dim=128)  # same hashing, another dimension: a different model as far as the store goes
TARGET = StoreModel(NEW.name, NEW.model, NEW.dim)
TARGETS = dict.fromkeys(SECTORS, TARGET)


def _store_name(request) -> str:
    return f"reembed_{request.node.name[-40:].lower()}"


@pytest.fixture
def store(make_store, settings, request):
    """A store of its own as the role a re-embed runs as (maintenance), with the engine of its old model."""
    _, db = make_store(_store_name(request), role=DbRole.MAINTENANCE)
    return db, MemoryEngine(settings, OLD)


@pytest.fixture
def tenants(make_store, store, request):
    """The same store as the app role: what its tenants write and ask."""
    return make_store(_store_name(request))[1]


def add(tenants, engine, tenant, content):
    with tenants.session(tenant) as s:
        memory, _ = engine.add(s, tenant, MemoryCreate(content=content))
    return memory["id"]


def vector_models(db):
    with db.session() as s:
        return dict(s.execute(text("SELECT model || ':' || dim, count(*) FROM memory_vectors GROUP BY 1")).all())


def run_all_chunks(db, job_id, chunks):
    results = []
    for chunk in chunks:
        with db.session() as s:
            results.append(reembed.process_chunk(s, job_id, chunk.seq, lambda _: NEW))
    return results


def test_a_store_is_converted_chunk_by_chunk_and_switched_once_nothing_old_is_left(store, tenants, settings):
    db, engine = store
    contents = [f"Note {i} about the {('garden', 'invoice', 'meeting')[i % 3]} project" for i in range(30)]
    ids = [add(tenants, engine, "alice" if i % 2 else "bob", c) for i, c in enumerate(contents)]
    with db.session() as s:
        before = s.execute(text("SELECT count(*) FROM memory_vectors")).scalar_one()
        job_id = reembed.start_job(s, TARGETS, chunk_size=7)
    with db.session() as s:
        chunks = reembed.plan_round(s, job_id)
    assert sum(len(c.items) for c in chunks) == len(ids) and all(len(c.items) <= 7 for c in chunks)

    results = run_all_chunks(db, job_id, chunks)
    assert results[-1] is True and not any(results[:-1])  # only the last chunk sees the job's chunks all done
    with db.session() as s:  # a redelivered chunk finds its work done
        assert reembed.process_chunk(s, job_id, chunks[0].seq, lambda _: NEW) is None
        assert reembed.finish(s, job_id) == "succeeded"
        assert set(current_models(s).values()) == {TARGET}
        job = s.execute(
            text("SELECT status, progress_done, progress_total, result FROM jobs WHERE id = :j"), {"j": job_id}
        ).one()
        logged = s.execute(
            text("SELECT sum(item_count) FROM embed_logs WHERE job_id = :j AND purpose = 'reembed'"), {"j": job_id}
        ).scalar_one()
    assert vector_models(db) == {f"{NEW.model}:128": before}  # every vector converted, none lost or added
    assert (job.status, job.progress_done, job.progress_total) == ("succeeded", 30, 30)
    assert job.result["restart_with"] == "MNEMOFLOW_EMBEDDING_PROVIDER=synthetic"
    assert logged == 30

    # The old model's writers are refused with the way forward; the new model's are welcome and searchable.
    with pytest.raises(
        Conflict, match="every sector: the store's vectors were made by synthetic model 'synthetic-hash-v1' \\(128"
    ):
        add(tenants, engine, "alice", "written by a process still configured with the old model")
    converted = MemoryEngine(settings, NEW)
    add(tenants, converted, "alice", "The greenhouse tomatoes need watering")
    with tenants.reading("alice") as s:
        outcome = search(
            Retriever(settings, NEW), s, "alice", "greenhouse tomatoes watering", k=3, filters=_no_filters()
        )
    assert outcome.matches[0][1]["content"] == "The greenhouse tomatoes need watering"
    assert outcome.matches[0][0].dense_rank == 1


def test_vectors_written_by_late_old_model_writers_are_picked_up_by_another_round(store, tenants):
    db, engine = store
    for i in range(10):
        add(tenants, engine, "carol", f"Early memory number {i}")
    with db.session() as s:
        job_id = reembed.start_job(s, TARGETS, chunk_size=100)
    with db.session() as s:
        chunks = reembed.plan_round(s, job_id)
    run_all_chunks(db, job_id, chunks)
    late = add(tenants, engine, "carol", "Written by the old model while the job ran")  # the store still says old
    with db.session() as s:
        assert reembed.finish(s, job_id) == "replan"
        assert current_models(s)["semantic"].dim == 384  # not switched while an old vector remains
    with db.session() as s:
        second = reembed.plan_round(s, job_id)
    assert [item["id"] for c in second for item in c.items] == [str(late)]
    assert run_all_chunks(db, job_id, second) == [True]
    with db.session() as s:
        assert reembed.finish(s, job_id) == "succeeded"
        total = s.execute(text("SELECT progress_total FROM jobs WHERE id = :j"), {"j": job_id}).scalar_one()
    assert total == 11
    assert vector_models(db) == {f"{NEW.model}:128": 11}


def test_the_switch_waits_for_a_writer_in_flight_and_then_counts_its_vectors(store, tenants):
    db, engine = store
    add(tenants, engine, "dave", "A first memory")
    with db.session() as s:
        job_id = reembed.start_job(s, TARGETS, chunk_size=100)
    with db.session() as s:
        chunks = reembed.plan_round(s, job_id)
    run_all_chunks(db, job_id, chunks)

    outcome: list[str] = []
    # a writer's open transaction: it has checked the model and holds the shared lock
    writer = tenants._sessions(info={"tenant": "dave"})
    guard_store_model(writer, OLD)
    finisher = threading.Thread(target=lambda: outcome.append(_finish(db, job_id)))
    finisher.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not _waiting_for_advisory_lock(db):
        time.sleep(0.02)
    assert _waiting_for_advisory_lock(db) and not outcome  # the switch is blocked behind the writer
    prepared, _ = engine.prepare([MemoryCreate(content="Landed while the switch waited")], "dave")
    engine.store(writer, prepared, settle=True)
    writer.commit()
    writer.close()
    finisher.join(timeout=10)
    assert outcome == ["replan"]  # it saw the writer's vector and did not switch


def test_a_second_job_or_a_pointless_one_is_refused(store, tenants):
    db, engine = store
    add(tenants, engine, "erin", "Something to convert")
    with db.session() as s:
        with pytest.raises(Conflict, match="already uses"):
            reembed.start_job(s, dict.fromkeys(SECTORS, StoreModel(OLD.name, OLD.model, OLD.dim)), chunk_size=10)
        job_id = reembed.start_job(s, TARGETS, chunk_size=10)
    with db.session() as s, pytest.raises(Conflict, match=f"already running \\(job {job_id}\\)"):
        reembed.start_job(s, TARGETS, chunk_size=10)


def _finish(db, job_id):
    with db.session() as s:
        return reembed.finish(s, job_id)


def _waiting_for_advisory_lock(db) -> bool:
    with db.session() as s:
        return bool(
            s.execute(
                text(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = "
                    "(SELECT oid FROM pg_database WHERE datname = current_database())"
                )
            ).scalar_one()
        )


def _no_filters():
    return QueryFilters()


def test_advanced_mode_moves_one_sector_to_a_model_of_its_own(store, tenants, settings):
    db, engine = store
    feelings = add(tenants, engine, "fay", "I feel so happy and excited, I love this!!")  # emotional, among others
    fact = add(tenants, engine, "fay", "The capital of France is Paris, a fact from geography")
    with db.session() as s:
        job_id = reembed.start_job(s, {"emotional": TARGET}, chunk_size=50)
    with db.session() as s:
        chunks = reembed.plan_round(s, job_id)
    assert [item["id"] for c in chunks for item in c.items] == [str(feelings)]  # only memories with that sector
    run_all_chunks(db, job_id, chunks)
    with db.session() as s:
        assert reembed.finish(s, job_id) == "succeeded"
        models = {r.sector: (r.model, r.dim) for r in s.execute(text("SELECT sector, model, dim FROM sector_models"))}
        rows = s.execute(
            text("SELECT memory_id, sector, dim FROM memory_vectors WHERE memory_id IN (:a, :b)"),
            {"a": feelings, "b": fact},
        ).all()
        job = s.execute(text("SELECT result FROM jobs WHERE id = :j"), {"j": job_id}).scalar_one()
    assert models["emotional"] == (NEW.model, 128) and all(
        models[x] == (OLD.model, 384) for x in SECTORS if x != "emotional"
    )
    assert all(r.dim == (128 if r.sector == "emotional" else 384) for r in rows)
    assert job["restart_with"].startswith("MNEMOFLOW_EMBED_MODE=advanced MNEMOFLOW_SECTOR_PROVIDERS=")

    with pytest.raises(Conflict, match="emotional: the store's vectors were made by synthetic model"):
        add(tenants, engine, "fay", "Another happy, joyful, exciting day, I love it!!")  # a simple-mode writer
    advanced = MemoryEngine(
        settings.model_copy(update={"embed_mode": "advanced"}),
        OLD,
        sector_embedders={sector: NEW if sector == "emotional" else OLD for sector in SECTORS},
    )
    joyful = add(tenants, advanced, "fay", "Another happy, joyful, exciting day, I love it!!")
    with tenants.reading("fay") as s:
        outcome = search(Retriever(advanced.settings, advanced.embedders), s, "fay", "happy and excited", k=5)
    found = {c.id: c for c, _ in outcome.matches}
    assert feelings in found and joyful in found
    assert found[feelings].dense_rank is not None  # found by vector: the query was embedded per sector model
    with db.session() as s:
        written = s.execute(text("SELECT sector, dim FROM memory_vectors WHERE memory_id = :j"), {"j": joyful}).all()
    assert ("emotional", 128) in written and all(dim == (128 if sec == "emotional" else 384) for sec, dim in written)


def test_a_turn_is_reembedded_after_the_turns_it_follows(store, tenants):
    db, engine = store
    turns = ["Ivo: where did you park the camper van?", "Lea: behind the old mill", "Ivo: which mill?"]
    ids = []
    for turn in turns:
        with tenants.session("alice") as s:
            memory, _ = engine.add(s, "alice", MemoryCreate(content=turn), follows=ids[-1] if ids else None)
        ids.append(memory["id"])
    with db.session() as s:
        job_id = reembed.start_job(s, TARGETS, chunk_size=2)
    with db.session() as s:
        chunks = reembed.plan_round(s, job_id)
    for chunk in chunks:  # a chunk may hold a turn without the turns before it
        with db.session() as s:
            reembed.process_chunk(
                s, job_id, chunk.seq, lambda _: NEW, contexts_of=lambda u, i: engine.stored_contexts(s, u, i)
            )
    with db.session() as s:
        stored = {
            r.memory_id: np.array(json.loads(r.embedding), dtype=np.float32)
            for r in s.execute(
                text("SELECT DISTINCT ON (memory_id) memory_id, embedding::text FROM memory_vectors WHERE dim = 128")
            ).all()
        }
    np.testing.assert_allclose(stored[ids[0]], NEW.embed([turns[0]])[0], atol=1e-6)
    np.testing.assert_allclose(
        stored[ids[2]], NEW.embed_in_context([turns[2]], [f"{turns[0]} {turns[1]}"])[0], atol=1e-6
    )
