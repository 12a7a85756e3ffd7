"""The whole stack over HTTP: gateway process, real Celery worker processes, PostgreSQL, Valkey."""

from __future__ import annotations

import os
import time
import uuid

import httpx
import pytest
from sqlalchemy import text

from infra.embedded import free_port
from infra.processes import gateway_command, wait_healthy
from shared.embedding import SyntheticEmbedder
from shared.text import opaque_label
from tests.conftest import SEALER, running, service_env, wait_for_job

pytestmark = pytest.mark.e2e


def serving(http: httpx.Client) -> dict:
    """/health once it is ok: every work queue has a ready process (the worker's pool says so, the gateway reads it
    every 2 s)."""
    deadline = time.monotonic() + 60
    while (answer := http.get("/health")).status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_health_reports_provider_database_and_broker(http, worker):
    body = serving(http)
    assert body["ok"] is True
    assert body["embedding"]["provider"] == "synthetic" and body["embedding"]["dimensions"] == 384
    assert body["embedding"]["loaded"] is True and body["embedding"]["remote"] is False
    assert body["embedding"]["store"] == {"provider": "synthetic", "model": "synthetic-hash-v1", "dim": 384}
    assert body["embedding"]["matches_store"] is True and body["embedding"]["reembed_jobs"] == []
    assert body["database"]["ok"] and body["broker"]["ok"]


def test_a_token_budget_packs_the_best_memories_that_fit_and_says_so(http, tenant):
    long_note = "Release checklist for the payments service: " + "verify the migration and the rollback plan. " * 30
    for content in (long_note, "The payments release is on Friday", "Payments team owns the release checklist"):
        assert http.post("/memory/add", json={"content": content, "user_id": tenant}).is_success
    body = {"query": "payments release checklist", "user_id": tenant, "k": 5, "filters": {"min_score": 0}}
    unpacked = http.post("/memory/query", json=body).json()
    assert len(unpacked["matches"]) == 3 and "packing" not in unpacked
    packed = http.post("/memory/query", json=body | {"token_budget": 40}).json()
    contents = [m["content"] for m in packed["matches"]]
    assert long_note not in contents and len(contents) == 2  # ~350 tokens never fit; both short ones do
    assert packed["packing"]["returned"] == 2 and packed["packing"]["considered"] == 3
    assert packed["packing"]["tokens"] <= 40
    assert packed["packing"]["footnote"] == f"returned 2/3 memories, ~{packed['packing']['tokens']}/40 tokens"
    assert http.post("/memory/query", json=body | {"token_budget": 0}).status_code == 422


def test_link_route_links_two_memories_of_the_tenant(http, tenant):
    old = http.post("/memory/add", json={"content": "Standup is at 9:30", "user_id": tenant}).json()
    new = http.post("/memory/add", json={"content": "Standup moved to 10:00", "user_id": tenant}).json()
    link = {"src_id": new["id"], "dst_id": old["id"], "kind": "supersedes", "user_id": tenant}
    assert http.post("/memory/link", json=link).json()["kind"] == "supersedes"
    assert http.get(f"/memory/{old['id']}", params={"user_id": tenant}).json()["status"] == "superseded"
    foreign = http.post("/memory/link", json=link | {"user_id": f"{tenant}-x"})
    assert foreign.status_code == 404 and "not both memories" in foreign.json()["error"]["message"]
    restored = http.patch(f"/memory/{old['id']}", json={"status": "active", "user_id": tenant})
    assert restored.status_code == 200 and restored.json()["status"] == "active"


def test_every_model_call_is_logged_and_a_cache_hit_is_not(http, tenant):
    def newest_id() -> int:
        items = http.get("/maintenance/embed-logs", params={"limit": 1}).json()["items"]
        return items[0]["id"] if items else 0

    def mine() -> tuple[list[dict], dict]:
        logs = http.get("/maintenance/embed-logs", params={"limit": 1000}).json()
        return [row for row in logs["items"] if row["id"] > before and row["purpose"] in ("add", "query")], logs

    time.sleep(1)  # earlier tests' queries are logged within the gateway's 0.1 s aftermath interval
    before = newest_id()
    question = f"what do the zebras of {tenant} eat?"  # a text no other test asks: not in the cache
    assert http.post("/memory/add", json={"content": f"The zebras of {tenant} eat grass", "user_id": tenant}).is_success
    for _ in range(2):  # the second time the query's vector comes from the cache
        assert http.post("/memory/query", json={"query": question, "user_id": tenant}).is_success
    # A query's call is logged after its response is sent: a last, new question's line comes after the others.
    assert http.post("/memory/query", json={"query": f"where do the zebras of {tenant} sleep?", "user_id": tenant})
    deadline = time.monotonic() + 10
    while len(mine()[0]) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    rows, logs = mine()
    assert sorted(row["purpose"] for row in rows) == ["add", "query", "query"]
    assert all(row["status"] == "completed" and row["model"] == "synthetic-hash-v1" for row in rows)
    assert {"add", "query"} <= {row["purpose"] for row in logs["last_24h"]}


def test_add_get_patch_list_delete_round_trip(http, tenant):
    added = http.post(
        "/memory/add",
        json={
            "content": "Deploys happen on Tuesdays",
            "tags": ["ops"],
            "metadata": {"source": "chat"},
            "user_id": tenant,
        },
    )
    assert added.status_code == 200, added.text
    memory = added.json()
    assert memory["queryable"] is True and memory["deduplicated"] is False
    assert memory["primary_sector"] in memory["sectors"]

    again = http.post("/memory/add", json={"content": "Deploys happen on Tuesdays", "user_id": tenant}).json()
    assert again["id"] == memory["id"] and again["deduplicated"] is True

    fetched = http.get(f"/memory/{memory['id']}", params={"user_id": tenant}).json()
    assert fetched["metadata"] == {"source": "chat"} and fetched["tags"] == ["ops"]

    patched = http.patch(f"/memory/{memory['id']}", json={"tags": ["ops", "release"], "user_id": tenant}).json()
    assert patched["tags"] == ["ops", "release"] and patched["occurred_at"] is None
    dated = http.patch(f"/memory/{memory['id']}", json={"occurred_at": "2023-05-08T13:56:00", "user_id": tenant})
    assert dated.status_code == 200, dated.text
    assert dated.json()["occurred_at"] == "2023-05-08T13:56:00Z" and dated.json()["tags"] == ["ops", "release"]

    page = http.get("/memory/all", params={"user_id": tenant, "l": 10, "u": 0}).json()
    assert page["total"] == 1 and page["items"][0]["id"] == memory["id"]

    assert http.delete(f"/memory/{memory['id']}", params={"user_id": tenant}).status_code == 200
    assert http.get(f"/memory/{memory['id']}", params={"user_id": tenant}).status_code == 404


def test_query_is_openmemory_shaped_and_explains_on_request(http, tenant):
    for content in (
        "The wifi password at the lake house is bluebird42",
        "Mom's flight lands at 6pm on Friday",
        "Always run the linter before pushing",
    ):
        assert http.post("/memory/add", json={"content": content, "user_id": tenant}).status_code == 200
    plain = http.post("/memory/query", json={"query": "lake house wifi password", "user_id": tenant}).json()
    assert plain["query"] == "lake house wifi password"
    top = plain["matches"][0]
    assert "bluebird42" in top["content"]
    assert {"id", "content", "score", "sectors", "primary_sector", "path", "salience", "last_seen_at"} <= set(top)
    assert "trace" not in top
    assert not {"timings_ms", "query_sectors"} & set(plain)  # unset fields are left out, not sent as null
    response = http.post(
        "/memory/query", json={"query": "lake house wifi password", "user_id": tenant, "explain": True}
    )
    assert response.headers["content-type"] == "application/json"
    explained = response.json()
    trace = explained["matches"][0]["trace"]
    assert trace["lexical_rank"] == 1 and trace["components"]["similarity"] > 0
    assert {"embed", "dense", "fetch", "total"} <= set(explained["timings_ms"])
    # The route serialises its answer itself; the schema still documents it.
    documented = http.get("/openapi.json").json()["paths"]["/memory/query"]["post"]["responses"]["200"]
    assert documented["content"]["application/json"]["schema"]["$ref"].endswith("/QueryResponse")


def test_query_reinforces_hits_through_the_worker(http, tenant, worker):
    memory = http.post(
        "/memory/add", json={"content": "The boat is moored at pier 9", "user_id": tenant, "salience": 0.2}
    ).json()
    http.post("/memory/query", json={"query": "where is the boat moored", "user_id": tenant})

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        current = http.get(f"/memory/{memory['id']}", params={"user_id": tenant}).json()
        if current["coactivations"] == 1:
            break
        time.sleep(0.2)
    assert current["coactivations"] == 1
    assert current["salience"] == pytest.approx(0.7)  # 0.2 + 0.5 (decay seed's query reinforcement)


def test_queries_close_together_are_all_reinforced(http, tenant, worker):
    """The gateway gathers the reinforcement of queries answered close together into one message: each of
    them is still applied, once."""
    places = ["pier 9", "shed 4", "dock 2", "slip 7"]
    ids = [
        http.post(
            "/memory/add", json={"content": f"The boat number {i} is moored at {p}", "user_id": tenant, "salience": 0.2}
        ).json()["id"]
        for i, p in enumerate(places)
    ]
    for i, p in enumerate(places):
        hits = http.post("/memory/query", json={"query": f"boat number {i} {p}", "user_id": tenant, "k": 1}).json()
        assert [m["id"] for m in hits["matches"]] == [ids[i]]

    def coactivations() -> list[int]:
        return [http.get(f"/memory/{i}", params={"user_id": tenant}).json()["coactivations"] for i in ids]

    deadline = time.monotonic() + 30
    while coactivations() != [1, 1, 1, 1] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert coactivations() == [1, 1, 1, 1]


def test_two_tenants_queries_and_a_repeated_one_are_each_reinforced_once_per_query(http, tenant, worker):
    """Queries of two tenants answered close together reach the worker in one message, applied per tenant in
    one transaction: a memory two queries returned gains both boosts, as one query after the other."""
    other = f"{tenant}-b"
    canoe = {"content": "The canoe is behind the boathouse", "salience": 0.1}
    mine = http.post("/memory/add", json=canoe | {"user_id": tenant})
    theirs = http.post("/memory/add", json=canoe | {"user_id": other})
    ids = {tenant: mine.json()["id"], other: theirs.json()["id"]}
    for user in (tenant, other, tenant):
        hits = http.post("/memory/query", json={"query": "where is the canoe", "user_id": user, "k": 1}).json()
        assert [m["id"] for m in hits["matches"]] == [ids[user]]

    def seen() -> dict[str, tuple[int, float]]:
        rows = {user: http.get(f"/memory/{i}", params={"user_id": user}).json() for user, i in ids.items()}
        return {user: (row["coactivations"], row["salience"]) for user, row in rows.items()}

    deadline = time.monotonic() + 30
    while [c for c, _ in seen().values()] != [2, 1] and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)  # nothing more lands
    now = seen()
    assert now[tenant] == (2, pytest.approx(1.0))  # 0.1 + 0.5 + 0.5, capped at 1
    assert now[other] == (1, pytest.approx(0.6))


def test_a_read_only_query_reinforces_nothing(http, tenant, worker):
    memory = http.post(
        "/memory/add", json={"content": "The kayak is stored in shed 4", "user_id": tenant, "salience": 0.2}
    ).json()
    ask = {"query": "where is the kayak stored", "user_id": tenant}
    assert http.post("/memory/query", json=ask | {"reinforce": False}).json()["matches"][0]["id"] == memory["id"]
    http.post("/memory/query", json=ask)  # the control: this one does reinforce

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        current = http.get(f"/memory/{memory['id']}", params={"user_id": tenant}).json()
        if current["coactivations"] >= 1:
            break
        time.sleep(0.2)
    time.sleep(0.5)  # anything the first query had enqueued would have landed before the second's
    current = http.get(f"/memory/{memory['id']}", params={"user_id": tenant}).json()
    assert current["coactivations"] == 1 and current["salience"] == pytest.approx(0.7)


def test_injection_and_blindness_are_counted_per_tenant(http, tenant):
    http.post("/memory/add", json={"content": "Zebra crossings are painted white", "user_id": tenant})
    ask = {"query": "zebra crossings", "user_id": tenant, "reinforce": False}
    assert http.post("/memory/query", json=ask | {"filters": {"min_score": 0}}).json()["matches"]
    assert not http.post("/memory/query", json=ask | {"filters": {"min_score": 0.999}}).json()["matches"]
    assert not http.post("/memory/query", json=ask | {"user_id": f"{tenant}-empty"}).json()["matches"]

    deadline = time.monotonic() + 10  # counted after each response is sent
    while time.monotonic() < deadline:
        retrieval = http.get("/sectors", params={"user_id": tenant}).json()["retrieval"]
        if retrieval["queries"] == 2:
            break
        time.sleep(0.1)
    assert retrieval | {"window_days": 7} == {
        "window_days": 7,
        "queries": 2,
        "injected": 1,
        "blind": 1,
        "no_memories": 0,
        "injection_rate": 0.5,
        "blindness_rate": 0.5,
    }
    metrics = http.get("/metrics").text  # tenants appear as a hash of their user_id, keyed by the session's salt
    salt = os.environ["MNEMOFLOW_METRICS_TENANT_SALT"]
    blind, empty = opaque_label(tenant, salt), opaque_label(f"{tenant}-empty", salt)
    assert f'mnemoflow_tenant_queries_total{{outcome="blind",tenant="{blind}"}} 1.0' in metrics
    assert f'mnemoflow_tenant_queries_total{{outcome="no_memories",tenant="{empty}"}} 1.0' in metrics


def test_batch_goes_through_the_sector_queues_and_lands_once(http, tenant, worker, db):
    items = [{"content": f"Shipment {i} left the Rotterdam warehouse"} for i in range(120)]
    items += [
        {"content": "I feel relieved the audit is finally over"},
        {"content": "How to restart the VPN step by step"},
    ]
    items.append({"content": "Shipment 0 left the Rotterdam warehouse"})  # duplicate inside the batch
    items.append({"content": "shipment 1 left the rotterdam warehouse!"})  # one fact in other case and punctuation
    accepted = http.post("/memory/batch", json={"items": items, "user_id": tenant, "idempotency_key": "b1"})
    assert accepted.status_code == 202, accepted.text
    job_id = accepted.json()["job_id"]
    assert accepted.headers["location"] == f"/jobs/{job_id}"

    replay = http.post("/memory/batch", json={"items": items, "user_id": tenant, "idempotency_key": "b1"})
    assert replay.json()["job_id"] == job_id and replay.json()["status"] == "existing"

    job = wait_for_job(http, job_id, tenant)
    assert job["status"] == "succeeded", job
    assert job["progress"] == {"done": len(items), "total": len(items)}
    assert job["result"]["created"] == 122 and job["result"]["duplicates"] == 2
    ids = {m["content"]: m["id"] for m in http.get("/memory/all", params={"user_id": tenant, "l": 200}).json()["items"]}
    assert job["result"]["deduplicated"] == [
        {"index": 122, "id": ids["Shipment 0 left the Rotterdam warehouse"]},
        {"index": 123, "id": ids["Shipment 1 left the Rotterdam warehouse"]},
    ]
    assert job["result"]["deduplicated_truncated"] is False
    with db.session() as s:
        count = s.execute(text("SELECT count(*) FROM memories WHERE user_id = :u"), {"u": tenant}).scalar_one()
        sectors = (
            s.execute(text("SELECT DISTINCT sector FROM job_chunks WHERE job_id = :j"), {"j": job_id}).scalars().all()
        )
    assert count == 122
    assert len(sectors) >= 2  # routed to more than one sector queue
    found = http.post("/memory/query", json={"query": "Shipment 57 Rotterdam", "user_id": tenant}).json()
    assert any(m["content"] == "Shipment 57 left the Rotterdam warehouse" for m in found["matches"])


def test_a_sequence_batch_lets_a_query_reach_the_reply_to_what_it_matches(http, tenant, worker):
    turns = [
        "Maya: which ferry do you take to the island on Sundays?",
        "Theo: the early one, it leaves at seven",  # shares no word with the question below
        "Maya: good to know, thanks",
    ]
    items = [{"content": t, "occurred_at": f"2023-05-08T13:5{i}:00+00:00"} for i, t in enumerate(turns)]
    accepted = http.post("/memory/batch", json={"items": items, "user_id": tenant, "sequence": True})
    assert accepted.status_code == 202, accepted.text
    job = wait_for_job(http, accepted.json()["job_id"], tenant)
    assert job["status"] == "succeeded" and job["result"]["next_links"] == 2, job
    found = http.post(
        "/memory/query",
        json={
            "query": "ferry to the island on Sundays",
            "user_id": tenant,
            "explain": True,
            "k": 3,
            "retrieval": {"dense": False},  # only words find seeds: the reply can only come through its link
        },
    ).json()
    by_content = {m["content"]: m for m in found["matches"]}
    reply = by_content[turns[1]]
    assert reply["trace"]["hops"] == 1 and reply["path"][0] == by_content[turns[0]]["id"]
    assert reply["trace"]["components"]["activation"] > 0
    assert [by_content[t]["occurred_at"] for t in turns[:2]] == ["2023-05-08T13:50:00Z", "2023-05-08T13:51:00Z"]
    listed = http.get(
        "/memory/all",
        params={"user_id": tenant, "occurred_after": "2023-05-08T13:51:00", "occurred_before": "2023-05-08T13:59:00Z"},
    ).json()
    assert sorted(m["content"] for m in listed["items"]) == sorted(turns[1:]) and listed["total"] == 2
    thanks = by_content[turns[2]]  # two turns after the question: the question's match lends it context
    assert thanks["trace"]["context_from"] == by_content[turns[0]]["id"]
    assert thanks["trace"]["components"]["context"] > 0

    # Each turn was embedded after the two before it: the gateway passed them along with the item.
    by_vector = http.post(
        "/memory/query",
        json={
            "query": "ferry to the island",
            "user_id": tenant,
            "explain": True,
            "k": 3,
            "retrieval": {"lexical": False},
        },
    ).json()
    similarity = {m["content"]: m["trace"]["dense_similarity"] for m in by_vector["matches"]}
    synthetic = SyntheticEmbedder(dim=384)
    (query,) = synthetic.embed(["ferry to the island"])
    after = synthetic.embed_in_context(turns, ["", turns[0], f"{turns[0]} {turns[1]}"])
    for turn, vector in zip(turns, after, strict=True):
        assert similarity[turn] == pytest.approx(float(vector @ query), abs=1e-4)


def test_an_added_turn_can_follow_the_previous_one_and_an_unknown_one_is_refused(http, tenant):
    first = http.post("/memory/add", json={"content": "Ivo: where did you park the camper van?", "user_id": tenant})
    reply = http.post(
        "/memory/add",
        json={"content": "Lea: behind the old mill, by the river", "user_id": tenant, "follows": first.json()["id"]},
    )
    assert reply.status_code == 200, reply.text
    found = http.post(
        "/memory/query",
        json={"query": "camper van parked", "user_id": tenant, "explain": True, "retrieval": {"dense": False}},
    ).json()
    reached = {m["content"]: m for m in found["matches"]}["Lea: behind the old mill, by the river"]
    assert reached["trace"]["hops"] == 1 and reached["path"] == [first.json()["id"], reply.json()["id"]]

    for follows in (str(uuid.uuid4()), first.json()["id"]):  # unknown, and another tenant's
        refused = http.post(
            "/memory/add", json={"content": "an orphan turn", "user_id": f"{tenant}-other", "follows": follows}
        )
        assert refused.status_code == 404 and "follows" in refused.json()["error"]["message"]
    assert http.get("/memory/all", params={"user_id": f"{tenant}-other"}).json()["total"] == 0


def test_turns_added_one_by_one_with_a_session_id_reach_each_other_like_a_sequence(http, tenant):
    # A plain client (OpenMemory's, mem0's) sends no `follows`: the session in its metadata links the turns.
    turns = [
        "Maya: which ferry do you take to the island on Sundays?",
        "Theo: the early one, it leaves at seven",  # shares no word with the question below
        "Maya: good to know, thanks",
    ]
    ids = []
    for i, turn in enumerate(turns):
        metadata = {"session_id": "chat-7", "timestamp": f"2023-05-08T13:5{i}:00"}
        added = http.post("/memory/add", json={"content": turn, "user_id": tenant, "metadata": metadata})
        assert added.status_code == 200, added.text
        assert added.json()["occurred_at"] == f"2023-05-08T13:5{i}:00Z"
        ids.append(added.json()["id"])
    found = http.post(
        "/memory/query",
        json={
            "query": "ferry to the island on Sundays",
            "user_id": tenant,
            "explain": True,
            "k": 3,
            "retrieval": {"dense": False},  # only words find seeds: the reply can only come through its link
        },
    ).json()
    by_content = {m["content"]: m for m in found["matches"]}
    reply = by_content[turns[1]]
    assert reply["trace"]["hops"] == 1 and reply["path"] == ids[:2]
    thanks = by_content[turns[2]]  # two turns after the question: the question's match lends it context
    assert thanks["trace"]["context_from"] == ids[0]
    assert thanks["trace"]["components"]["context"] > 0


def test_sectors_report_counts_for_the_tenant(http, tenant):
    http.post("/memory/add", json={"content": "I feel grateful for the team today", "user_id": tenant})
    body = http.get("/sectors", params={"user_id": tenant}).json()
    assert body["sectors"] == ["episodic", "semantic", "procedural", "emotional", "reflective"]
    assert sum(s["count"] for s in body["stats"]) == 1
    assert body["lifecycle"] == {
        "tiers": {"hot": 0, "warm": 1, "cold": 0},
        "compression": {"full": 1, "compressed": 0, "fingerprinted": 0},
    }
    assert body["configs"]["emotional"]["decay_lambda"] == pytest.approx(0.02)
    assert body["index"] == {"fresh_vectors": 0}  # a single add is indexed at once


@pytest.mark.parametrize(
    ("method", "path", "payload", "status", "fragment"),
    [
        ("post", "/memory/add", {"content": ""}, 422, "content"),
        ("post", "/memory/add", {"content": "   "}, 422, "non-whitespace"),
        ("post", "/memory/add", {"content": 42}, 422, "content"),
        ("post", "/memory/add", {"content": "x", "tags": "notalist"}, 422, "tags"),
        ("post", "/memory/add", {"content": "x", "unknown": 1}, 422, "unknown"),
        ("post", "/memory/add", {"content": "x" * 100_001}, 422, "limit"),
        ("post", "/memory/add", {"content": "nul \u0000 byte"}, 422, "NUL"),
        ("post", "/memory/add", {"content": "x", "metadata": {"k": "\u0000"}}, 422, "NUL"),
        ("post", "/memory/add", {"content": "x", "tags": ["a\u0000"]}, 422, "NUL"),
        ("post", "/memory/query", {"query": "\u0000"}, 422, "NUL"),
        ("post", "/memory/query", {"query": "why " * 4097}, 422, "16384 characters"),
        ("post", "/memory/query", {"query": "x", "k": 0}, 422, "k"),
        ("post", "/memory/query", {"query": "x", "k": 201}, 422, "maximum"),
        ("post", "/memory/query", {"query": "x", "filters": {"sector": "dreams"}}, 422, "unknown sector"),
        ("post", "/memory/query", {"query": "x", "retrieval": {"lexical": False, "dense": False}}, 422, "at least one"),
        ("post", "/memory/query", {"query": "x", "retrieval": {"rank": "best"}}, 422, "rank"),
        ("post", "/memory/query", {"query": "x", "diversity": 1.5}, 422, "diversity"),
        ("post", "/memory/query", {"query": "x", "token_budget": "lots"}, 422, "token_budget"),
        ("post", "/memory/batch", {"items": []}, 422, "items"),
        ("post", "/maintenance/reembed", {"provider": "word2vec"}, 422, "provider"),
        ("post", "/maintenance/reembed", {"provider": "openai"}, 422, "MNEMOFLOW_VECTOR_DIM"),
        ("post", "/maintenance/reembed", {"provider": "synthetic"}, 409, "already uses"),
        ("get", "/maintenance/embed-logs?status=maybe", None, 422, "status"),
        ("post", "/memory/reinforce", {"id": "not-a-uuid"}, 422, "id"),
        ("get", "/memory/not-a-uuid", None, 422, "memory_id"),
        ("get", "/memory/all?sector=dreams", None, 422, "unknown sector"),
        ("get", "/memory/all?l=0", None, 422, "l"),
        ("get", f"/memory/{uuid.uuid4()}", None, 404, "not found"),
        ("get", f"/jobs/{uuid.uuid4()}", None, 404, "not found"),
        ("post", "/memory/reinforce", {"id": str(uuid.uuid4())}, 404, "not found"),
        ("post", "/memory/link", {"src_id": str(uuid.uuid4()), "dst_id": str(uuid.uuid4())}, 404, "not both"),
        ("post", "/memory/link", {"src_id": "11" * 16, "dst_id": "11" * 16}, 422, "two different"),
        ("post", "/memory/link", {"src_id": str(uuid.uuid4()), "dst_id": str(uuid.uuid4()), "kind": "x"}, 422, "kind"),
        ("patch", f"/memory/{uuid.uuid4()}", {"status": "forgotten"}, 422, "status"),
        ("patch", f"/memory/{uuid.uuid4()}", {}, 422, "nothing to update"),
        ("post", "/memory/add", {"content": "x", "occurred_at": "last tuesday"}, 422, "occurred_at"),
        ("patch", f"/memory/{uuid.uuid4()}", {"occurred_at": "2023-13-01"}, 422, "occurred_at"),
        ("patch", f"/memory/{uuid.uuid4()}", {"status": "superseded"}, 404, "not found"),
        (
            "post",
            "/memory/query",
            {"query": "x", "filters": {"occurred_after": "2023-06-01", "occurred_before": "2023-05-01"}},
            422,
            "occurred_after is later than occurred_before",
        ),
        ("post", "/memory/query", {"query": "x", "filters": {"occurred_after": "June"}}, 422, "occurred_after"),
        ("get", "/memory/all?occurred_before=yesterday", None, 422, "occurred_before"),
    ],
)
def test_bad_input_gets_a_clear_4xx(http, method, path, payload, status, fragment):
    response = http.request(method.upper(), path, json=payload)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert fragment in error["message"] or fragment in str(error.get("details"))


def test_malformed_json_and_oversize_bodies(http, gateway):
    bad = http.post("/memory/add", content=b'{"content": "x",', headers={"content-type": "application/json"})
    assert bad.status_code == 422 and "not valid JSON" in bad.json()["error"]["message"]
    huge = http.post("/memory/add", content=b"x" * (64 * 1024 * 1024 + 1), headers={"content-type": "application/json"})
    assert huge.status_code == 413 and "exceeds" in huge.json()["error"]["message"]


def test_foreign_tenant_cannot_read_or_delete(http, tenant):
    memory = http.post("/memory/add", json={"content": "Private diary entry", "user_id": tenant}).json()
    intruder = f"{tenant}-x"
    assert http.get(f"/memory/{memory['id']}", params={"user_id": intruder}).status_code == 404
    assert http.delete(f"/memory/{memory['id']}", params={"user_id": intruder}).status_code == 404
    found = http.post("/memory/query", json={"query": "private diary entry", "user_id": intruder}).json()
    assert found["matches"] == []
    assert http.get(f"/memory/{memory['id']}", params={"user_id": tenant}).status_code == 200


def _sample(http, name: str, **labels: str) -> float:
    """One sample of /metrics by name and labels (0 when it has not been exported yet)."""
    wanted = name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
    for line in http.get("/metrics").text.splitlines():
        if line.startswith(wanted + " "):
            return float(line.split()[-1])
    return 0.0


def test_metrics_count_requests_by_route_template_and_status(http, worker, tenant):
    serving(http)
    health = {"method": "GET", "route": "/health", "status": "200"}
    missing = {"method": "GET", "route": "/memory/{memory_id}", "status": "404"}
    latency = {"method": "GET", "route": "/memory/{memory_id}"}
    before = (
        _sample(http, "mnemoflow_http_requests_total", **health),
        _sample(http, "mnemoflow_http_requests_total", **missing),
        _sample(http, "mnemoflow_http_request_seconds_count", **latency),
    )
    assert http.get("/health").status_code == 200
    for _ in range(2):
        assert http.get(f"/memory/{uuid.uuid4()}", params={"user_id": tenant}).status_code == 404
    after = (
        _sample(http, "mnemoflow_http_requests_total", **health),
        _sample(http, "mnemoflow_http_requests_total", **missing),
        _sample(http, "mnemoflow_http_request_seconds_count", **latency),
    )
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 2, 2]


def test_metrics_time_each_stage_of_every_query(http, tenant):
    """Every query's stages, asked with `explain` or not, land in `mnemoflow_query_stage_seconds`."""
    http.post("/memory/add", json={"content": "The ferry to the island leaves at nine", "user_id": tenant})
    stages = ("embed", "dense", "fetch", "score", "total")
    before = [_sample(http, "mnemoflow_query_stage_seconds_count", stage=stage) for stage in stages]
    total_before = _sample(http, "mnemoflow_query_stage_seconds_sum", stage="total")
    for _ in range(3):
        assert http.post("/memory/query", json={"query": "when does the ferry leave", "user_id": tenant}).is_success
    after = [_sample(http, "mnemoflow_query_stage_seconds_count", stage=stage) for stage in stages]
    assert [a - b for a, b in zip(after, before, strict=True)] == [3] * len(stages)
    assert _sample(http, "mnemoflow_query_stage_seconds_sum", stage="total") > total_before


def _hot_row_hits(http) -> float:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith('mnemoflow_hot_row_cache_lookups_total{outcome="hit"}'):
            return float(line.split()[-1])
    raise AssertionError("the hot-row cache metric is not exported")


def test_a_hot_memory_comes_back_from_the_row_cache_with_its_payload(http, tenant, db):
    added = http.post(
        "/memory/add",
        json={"content": "Spare keys for the dinghy are in the blue tin", "user_id": tenant, "metadata": {"k": 1}},
    ).json()
    with db.session() as s:  # the decay cycle would get it there after repeated use
        s.execute(text("UPDATE memories SET tier = 'hot' WHERE id = :id"), {"id": added["id"]})
    before = _hot_row_hits(http)
    body = {"query": "dinghy spare keys", "user_id": tenant, "reinforce": False}
    first = http.post("/memory/query", json=body).json()["matches"][0]
    second = http.post("/memory/query", json=body).json()["matches"][0]
    assert _hot_row_hits(http) == before + 1  # the first query put it there, the second read it
    assert first == second and second["metadata"] == {"k": 1}


@pytest.fixture(scope="module")
def secured(servers, tmp_path_factory):
    """A second gateway with API keys configured: each key bound to one tenant."""
    port = free_port()
    env = service_env(servers, MNEMOFLOW_API_KEYS="alice-key-0123456789=alice,bob-key-0123456789=bob")
    log_path = tmp_path_factory.mktemp("logs") / "secured.log"
    with running(gateway_command(host="127.0.0.1", port=port), env, log_path) as proc:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc, log_path=log_path)
        yield url


def test_api_keys_bind_a_tenant(secured):
    with httpx.Client(base_url=secured, timeout=10) as client:
        anonymous = client.post("/memory/add", json={"content": "hello"})
        assert anonymous.status_code == 401 and "API key" in anonymous.json()["error"]["message"]
        wrong = client.post("/memory/add", json={"content": "hello"}, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        alice = {"Authorization": "Bearer alice-key-0123456789"}
        added = client.post("/memory/add", json={"content": "Alice's note about tulips"}, headers=alice)
        assert added.status_code == 200 and added.json()["user_id"] == "alice"
        spoof = client.post("/memory/add", json={"content": "x", "user_id": "bob"}, headers=alice)
        assert spoof.status_code == 403 and "alice" in spoof.json()["error"]["message"]
        bob = {"x-api-key": "bob-key-0123456789"}
        assert client.get(f"/memory/{added.json()['id']}", headers=bob).status_code == 404
        assert client.post("/memory/query", json={"query": "tulips"}, headers=bob).json()["matches"] == []


def test_query_embeddings_are_cached_in_redis(http, tenant, servers):
    import redis

    client = redis.Redis.from_url(servers["redis_url"])
    question = f"what did {tenant} say about the harbour?"
    http.post("/memory/query", json={"query": question, "user_id": tenant})
    deadline = time.monotonic() + 10  # written behind the answer, by the gateway's aftermath thread
    while not (keys := client.keys(f"mnemoflow:qemb:synthetic:synthetic-hash-v1:384:{{{tenant}}}:*")):
        assert time.monotonic() < deadline, "the gateway did not store the query's embedding"
        time.sleep(0.05)
    assert len(keys) == 1 and len(SEALER.open(keys[0].decode(), client.get(keys[0]) or b"") or b"") == 4 * 384


def test_the_cli_adds_a_turn_after_another(gateway, tenant):
    from typer.testing import CliRunner

    from services.cli.main import app

    runner = CliRunner()
    env = {"MNEMOFLOW_URL": gateway}
    first = runner.invoke(app, ["add", "Noa: the ferry leaves at nine", "--user", tenant], env=env)
    assert first.exit_code == 0, first.output
    first_id = first.output.split()[0]
    second = runner.invoke(
        app, ["add", "Kai: then we meet at half eight", "--user", tenant, "--follows", first_id], env=env
    )
    assert second.exit_code == 0, second.output
    unknown = runner.invoke(app, ["add", "Kai: hm", "--user", tenant, "--follows", str(uuid.uuid4())], env=env)
    assert unknown.exit_code != 0 and "follows" in unknown.output
    dated = runner.invoke(app, ["add", "Noa: see you", "--user", tenant, "--occurred-at", "2023-05-08"], env=env)
    assert dated.exit_code == 0, dated.output
    stored = httpx.get(f"{gateway}/memory/{dated.output.split()[0]}", params={"user_id": tenant}).json()
    assert stored["occurred_at"] == "2023-05-08T00:00:00Z"
    undated = runner.invoke(app, ["add", "Noa: bye", "--user", tenant, "--occurred-at", "soon"], env=env)
    assert undated.exit_code != 0 and "occurred_at" in undated.output

    asked = ["query", "Noa ferry see you", "--user", tenant]
    everything = runner.invoke(app, asked, env=env)
    assert everything.exit_code == 0 and "the ferry leaves at nine" in everything.output, everything.output
    in_may = runner.invoke(app, [*asked, "--occurred-after", "2023-05-01", "--occurred-before", "2023-05-31"], env=env)
    assert in_may.exit_code == 0 and "see you" in in_may.output and "ferry" not in in_may.output, in_may.output
    reversed_range = runner.invoke(
        app, [*asked, "--occurred-after", "2024-01-01", "--occurred-before", "2023-01-01"], env=env
    )
    assert reversed_range.exit_code != 0 and "later than occurred_before" in reversed_range.output
