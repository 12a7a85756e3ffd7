"""Export and import on a real store: a tenant exported, erased and imported is the same tenant (rows, vectors,
waypoints, BM25 statistics, answers); an import run twice stores nothing twice; another tenant's ids are never
written over; vectors of another model are made again; a broken file writes nothing."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
import redis
from sqlalchemy import text

from shared.api.memories import MemoryCreate
from shared.data import erasure, import_store
from shared.data.export import export_lines
from shared.data.import_plan import alias, plan_import
from shared.errors import InvalidInput
from shared.jobs import ChunkSpec
from shared.lifecycle.compression import fingerprint_summary, fingerprint_vector, pool_to
from shared.memory.chunks import store_chunk
from shared.storage import decay_steps
from shared.storage import documents as document_store
from shared.storage import jobs as job_store
from shared.storage import waypoints as waypoint_store
from shared.storage.decay_steps import CompressedMemory, VectorRow
from tests.integration.helpers import add, item, query

pytestmark = pytest.mark.integration


def _populate(db, maintenance, engine, tenant) -> dict[str, uuid.UUID]:
    """Memories in every state a store has: linked adds of a conversation, a superseded one, one reinforced, bulk
    ones still in the fresh tier, a compressed one and a fingerprinted one."""
    ids = {}
    start = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
    turns = [
        "Noa: the ferry to Harwich leaves from pier two at seven fifteen",
        "Kai: then we meet at the harbour cafe at half past six",
        "Noa: bring the blue umbrella, the forecast says rain",
        "Kai: I also booked the cabin with the round window",
        "Noa: my sister Ilse joins us in Harwich with her dog",
        "Kai: the dog is called Pepper and hates thunder",
    ]
    for i, turn in enumerate(turns):
        memory, _ = add(
            db,
            engine,
            tenant,
            turn,
            tags=["trip", f"turn-{i}"],
            metadata={"session_id": "trip-chat", "speaker": turn.split(":")[0]},
            occurred_at=start + timedelta(minutes=i),
        )
        ids[f"turn{i}"] = memory["id"]
    fact, _ = add(db, engine, tenant, "The museum closes at five on Sundays", tags=["museum"])
    newer, _ = add(db, engine, tenant, "The museum closes at six on Sundays since May", tags=["museum"])
    ids["old_fact"], ids["new_fact"] = fact["id"], newer["id"]
    with db.session() as s:
        assert waypoint_store.create_link(s, tenant, newer["id"], fact["id"], kind="supersedes", weight=0.9)
        s.execute(
            text("UPDATE memories SET salience = 0.93, recall_lift = 0.2, coactivations = 4 WHERE id = :id"),
            {"id": ids["turn2"]},
        )
    with db.session() as s:  # a document, and a bulk chunk of its text: fresh tier, terms not counted yet
        document_id = document_store.insert_document(
            s,
            user_id=tenant,
            source_type="upload",
            source_uri=None,
            filename="shelves.txt",
            mime_type="text/plain",
            fmt="text",
            byte_size=120,
            content_hash=f"{tenant}-shelves",
            url_hash=None,
            meta={"metadata": {"owner": "harbour"}},
        )
        document_store.set_status(s, document_id, "done", chunk_count=4, meta={"extracted": {"title": "Shelves"}})
        ids["document"] = document_id
        job_id, _ = job_store.create_job(s, user_id=tenant, kind="batch", total=4, params={}, idempotency_key=None)
        job_store.add_chunks(
            s,
            job_id,
            [
                ChunkSpec(
                    0,
                    "semantic",
                    [
                        item(
                            f"Warehouse shelf {i} holds spare oars",
                            placement={"document_id": document_id, "chunk_index": i},
                        )
                        for i in range(4)
                    ],
                )
            ],
        )
    with db.session() as s:
        store_chunk(engine, s, job_id, 0)
    squeezed, _ = add(db, engine, tenant, "The lighthouse keeper logs the tide at dawn", tags=["tide"])
    faded, _ = add(db, engine, tenant, "An old note about the lost bicycle bell", tags=["bell"])
    ids["compressed"], ids["fingerprinted"] = squeezed["id"], faded["id"]
    with maintenance.session() as s:
        rows = decay_steps.lock_for_compression(s, [squeezed["id"], faded["id"]], with_vectors={squeezed["id"]})
        pooled = [
            VectorRow(v.memory_id, v.sector, 96, v.model, pool_to(v.embedding, 96))
            for v in rows[squeezed["id"]].vectors
        ]
        summary = fingerprint_summary(faded["content"])
        decay_steps.write_compressed(
            s,
            [
                CompressedMemory(squeezed["id"], "lighthouse keeper tide", "compressed", vector_dim=96),
                CompressedMemory(
                    faded["id"], summary, "fingerprinted", fingerprint=fingerprint_vector(str(faded["id"]), summary)
                ),
            ],
            pooled,
        )
    return ids


def _export(app_db, tenant, **kw) -> list[bytes]:
    return list(export_lines(app_db, tenant, **kw))


def _import(app_db, engine, settings, tenant, lines: list[bytes]) -> dict:
    """The gateway's half, then every chunk as the workers store them (the released waypoint chunks last)."""
    with app_db.session(tenant) as s:
        planned = plan_import(s, tenant, lines, limits=settings.limits, chunk_size=3)
    queue = [(m.seq, m.sector) for m in planned.messages]
    while queue:
        seq, _ = queue.pop(0)
        with app_db.session(tenant) as s:
            outcome = import_store.store_chunk(engine, s, planned.job_id, seq)
        if outcome is not None:
            queue += outcome.release
    with app_db.session(tenant) as s:
        job = job_store.get_job(s, planned.job_id)
        totals = job_store.chunk_totals(s, planned.job_id)
    return {"planned": planned, "job": job, "totals": totals}


def _state(maintenance, tenant) -> dict:
    """Everything stored of the tenant, by memory id: rows, vectors (as bytes), waypoints, BM25 statistics."""
    with maintenance.session() as s:
        memories = {
            r["id"]: {k: v for k, v in r.items() if k not in ("id", "user_id")}
            for r in s.execute(
                text(
                    "SELECT id, content, content_hash, summary, primary_sector, sectors, tags, meta, salience, "
                    "recall_lift, decay_lambda, coactivations, tier, status, confidence, classification_confidence, "
                    "compression, vector_dim, fingerprint::text AS fingerprint, version, created_at, updated_at, "
                    "last_seen_at, last_used_at, occurred_at, document_id, chunk_index, search::text AS search "
                    "FROM memories WHERE user_id = :u"
                ),
                {"u": tenant},
            ).mappings()
        }
        vectors = {
            (r.memory_id, r.sector): (r.dim, r.model, r.indexed, r.embedding)
            for r in s.execute(
                text(
                    "SELECT memory_id, sector, dim, model, indexed, embedding::text AS embedding FROM memory_vectors "
                    "WHERE user_id = :u"
                ),
                {"u": tenant},
            )
        }
        waypoints = {
            (r.src_id, r.dst_id, r.kind): (r.weight, r.created_at)
            for r in s.execute(
                text("SELECT src_id, dst_id, kind, weight, created_at FROM waypoints WHERE user_id = :u"), {"u": tenant}
            )
        }
        terms = dict(
            s.execute(text("SELECT lexeme, df FROM term_stats WHERE user_id = :u AND df <> 0"), {"u": tenant}).all()
        )
        totals = s.execute(
            text("SELECT documents, total_length FROM tenant_stats WHERE user_id = :u"), {"u": tenant}
        ).first()
        documents = {
            r["id"]: {k: v for k, v in r.items() if k not in ("id", "user_id", "job_id")}
            for r in s.execute(text("SELECT * FROM documents WHERE user_id = :u"), {"u": tenant}).mappings()
        }
    return {
        "memories": memories,
        "vectors": vectors,
        "waypoints": waypoints,
        "terms": terms,
        "totals": tuple(totals) if totals else None,
        "documents": documents,
    }


QUESTIONS = ["ferry to Harwich pier", "what is the dog called", "museum opening hours", "lighthouse tide", "bicycle"]


def _answers(db, retriever, tenant) -> list[list[tuple[uuid.UUID, str]]]:
    return [[(row["id"], row["content"]) for _, row in query(db, retriever, tenant, q).matches] for q in QUESTIONS]


def _erase(maintenance, app_db, settings, servers, tenant) -> None:
    client = redis.Redis.from_url(servers["redis_url"])
    with maintenance.session() as s:
        job, _ = erasure.start(s, tenant)
    while erasure.run_step(maintenance, app_db, client, settings, job["id"], budget=60) != "done":
        pass


def test_export_erase_import_gives_back_the_same_tenant(
    app_db, db, maintenance, engine, retriever, settings, servers, tenant
):
    _populate(db, maintenance, engine, tenant)
    before, answers = _state(maintenance, tenant), _answers(db, retriever, tenant)
    lines = _export(app_db, tenant)
    header, end = json.loads(lines[0]), json.loads(lines[-1])
    assert header["type"] == "header" and header["version"] == 1 and header["models"]["semantic"]["dim"] == 384
    assert end == {
        "type": "end",
        "documents": 1,
        "memories": len(before["memories"]),
        "waypoints": len(before["waypoints"]),
    }
    _erase(maintenance, app_db, settings, servers, tenant)
    assert _state(maintenance, tenant)["memories"] == {}
    imported = _import(app_db, engine, settings, tenant, lines)
    assert imported["job"]["status"] == "succeeded"
    assert imported["totals"]["created"] == len(before["memories"]) and imported["totals"]["reembedded"] == 0
    after = _state(maintenance, tenant)
    for memory_id, row in before["memories"].items():  # field by field first: a clearer message
        assert {k: v for k, v in after["memories"][memory_id].items() if v != row[k]} == {}, row["content"]
    assert after == before  # same ids, rows, vectors (bytes), waypoints, term statistics
    assert _answers(db, retriever, tenant) == answers


def test_importing_a_file_twice_stores_nothing_twice(app_db, db, maintenance, engine, settings, tenant):
    _populate(db, maintenance, engine, tenant)
    before = _state(maintenance, tenant)
    again = _import(app_db, engine, settings, tenant, _export(app_db, tenant))
    assert again["job"]["status"] == "succeeded"
    assert again["totals"]["created"] == 0 and again["totals"]["existing"] == len(before["memories"])
    assert again["totals"]["links"] == 0
    assert _state(maintenance, tenant) == before


def test_another_tenants_ids_are_never_written_over(app_db, db, maintenance, engine, retriever, settings, tenant):
    ids = _populate(db, maintenance, engine, tenant)
    mine = _state(maintenance, tenant)
    lines = _export(app_db, tenant)
    other = f"{tenant}-copy"
    with db.session(other) as s:  # the copy's tenant already holds one of the contents, under an id of its own
        held, _ = engine.add(s, other, MemoryCreate(content="Kai: the dog is called Pepper and hates thunder"))
    copied = _import(app_db, engine, settings, other, lines)
    assert copied["job"]["status"] == "succeeded"
    assert _state(maintenance, tenant) == mine  # the source tenant is untouched
    theirs = _state(maintenance, other)
    assert len(theirs["memories"]) == len(mine["memories"])  # the held one stands for the file's
    assert held["id"] in theirs["memories"]
    assert not set(theirs["memories"]) & set(mine["memories"])  # every id was another tenant's: aliased
    assert alias(other, ids["turn0"]) in theirs["memories"]
    # the waypoints came along, mapped: the next link into the held memory, the supersedes between the facts
    assert (alias(other, ids["turn4"]), held["id"], "next") in theirs["waypoints"]
    assert (alias(other, ids["new_fact"]), alias(other, ids["old_fact"]), "supersedes") in theirs["waypoints"]
    assert len(theirs["waypoints"]) == len(mine["waypoints"])
    assert {m["document_id"] for m in theirs["memories"].values()} - {None} == {alias(other, ids["document"])}
    # the same memories answer (in another order where the held one, newer and unused, ranks otherwise)
    assert [{c for _, c in a} for a in _answers(db, retriever, other)] == [
        {c for _, c in a} for a in _answers(db, retriever, tenant)
    ]


def test_vectors_of_another_model_are_made_again(app_db, db, maintenance, engine, settings, tenant):
    _populate(db, maintenance, engine, tenant)
    lines = []
    for raw in _export(app_db, tenant):
        line = json.loads(raw)
        for vector in line["vectors"] if line["type"] == "memory" else []:
            vector["model"] = "some-other-model"
        lines.append(json.dumps(line).encode())
    other = f"{tenant}-moved"
    moved = _import(app_db, engine, settings, other, lines)
    assert moved["job"]["status"] == "succeeded"
    assert moved["totals"]["reembedded"] == moved["totals"]["created"] - 1  # all but the fingerprinted one
    state = _state(maintenance, other)
    assert {model for _, model, _, _ in state["vectors"].values()} == {engine.embedder.model}
    assert {dim for dim, _, _, _ in state["vectors"].values()} == {384}  # the compressed one came back full
    assert sorted(m["compression"] for m in state["memories"].values()).count("fingerprinted") == 1
    vector_of = {(memory_id, sector): v for (memory_id, sector), v in state["vectors"].items() if sector == "semantic"}
    some = next(i for i, m in state["memories"].items() if m["content"].startswith("Warehouse shelf 0"))
    expected = engine.embedder.embed(["Warehouse shelf 0 holds spare oars"])[0]
    stored = np.array(json.loads(vector_of[(some, "semantic")][3]), dtype=np.float32)
    assert np.allclose(stored, expected, atol=1e-6)


def test_a_broken_file_writes_nothing(app_db, db, maintenance, engine, settings, tenant):
    _populate(db, maintenance, engine, tenant)
    lines = _export(app_db, tenant)
    target = f"{tenant}-broken"
    cases = {
        "cut short": lines[:-1],
        "a bad line": [*lines[:3], b'{"type": "memory", "id": "not-a-uuid"}\n', *lines[3:]],
        "counts that do not match": [*lines[:2], *lines[3:]],
        "no header": lines[1:],
    }
    for name, broken in cases.items():
        with pytest.raises(InvalidInput) as error, app_db.session(target) as s:
            plan_import(s, target, broken, limits=settings.limits, chunk_size=3)
        assert error.value.message, name
    assert "line 4" in str(_error(app_db, settings, target, cases["a bad line"]))
    with maintenance.session() as s:
        jobs = s.execute(text("SELECT count(*) FROM jobs WHERE user_id = :u"), {"u": target}).scalar_one()
    assert jobs == 0 and _state(maintenance, target)["memories"] == {}


def _error(app_db, settings, tenant, lines):
    try:
        with app_db.session(tenant) as s:
            plan_import(s, tenant, lines, limits=settings.limits, chunk_size=3)
    except InvalidInput as exc:
        return exc.message
    raise AssertionError("refused nothing")
