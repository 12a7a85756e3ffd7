"""A tenant filled as use leaves it, and how to read it back (its answers, its export): the e2e tests of the data a
tenant owns share them."""

from __future__ import annotations

import json
import time

import httpx

from tests.conftest import wait_for_job

QUESTIONS = [
    "when does the ferry leave?",
    "what is the dog called",
    "museum opening hours on Sunday",
    "who joins the trip in Harwich",
    "spare oars in the warehouse",
    "the budget review notes",
]


def wait(predicate, timeout: float = 120, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not reached in time")


def settled(http: httpx.Client, tenant: str) -> bool:
    """Every vector of the tenant merged into the index (what the merge links is linked)."""
    return http.get("/sectors", params={"user_id": tenant}).json()["index"]["fresh_vectors"] == 0


def fill(http: httpx.Client, tenant: str) -> None:
    """A tenant as use leaves it: a conversation added turn by turn, facts, a supersedes link, a reinforced memory,
    a batch, an ingested document."""
    turns = [
        "Noa: the ferry to Harwich leaves from pier two at seven fifteen",
        "Kai: then we meet at the harbour cafe at half past six",
        "Noa: my sister Ilse joins us in Harwich with her dog",
        "Kai: the dog is called Pepper and hates thunder",
    ]
    for i, turn in enumerate(turns):
        added = http.post(
            "/memory/add",
            json={
                "content": turn,
                "user_id": tenant,
                "tags": ["trip"],
                "metadata": {"session_id": "trip", "timestamp": f"2025-03-01T09:0{i}:00Z"},
            },
        )
        assert added.status_code == 200, added.text
    old = http.post("/memory/add", json={"content": "The museum closes at five on Sundays", "user_id": tenant}).json()
    new = http.post(
        "/memory/add", json={"content": "The museum closes at six on Sundays since May", "user_id": tenant}
    ).json()
    link = {"src_id": new["id"], "dst_id": old["id"], "kind": "supersedes", "weight": 0.9, "user_id": tenant}
    assert http.post("/memory/link", json=link).status_code == 200
    assert http.post("/memory/reinforce", json={"id": new["id"], "user_id": tenant}).status_code == 200
    batch = http.post(
        "/memory/batch",
        json={
            "items": [{"content": f"Warehouse shelf {i} holds spare oars and rope"} for i in range(12)],
            "user_id": tenant,
        },
    ).json()
    assert wait_for_job(http, batch["job_id"], tenant)["status"] == "succeeded"
    document = "The budget review notes.\n\nTravel costs rose by a tenth.\n\nThe ferry tickets were refunded."
    ingested = http.post(
        "/memory/ingest",
        json={
            "content_type": "txt",
            "data": document,
            "user_id": tenant,
            "config": {"chunk_size": 16, "chunk_overlap": 0},
        },
    ).json()
    assert wait_for_job(http, ingested["job_id"], tenant)["status"] == "succeeded"
    wait(lambda: settled(http, tenant))


def total(http: httpx.Client, tenant: str) -> int:
    return int(http.get("/memory/all", params={"user_id": tenant, "l": 1}).json()["total"])


def answers(http: httpx.Client, tenant: str) -> list[list[tuple[str, str]]]:
    """Each question's matches in rank order, as (id, content), asked read-only (`reinforce: false`). Scores are left
    out: recency moves them a little with the clock between two askings."""
    out = []
    for question in QUESTIONS:
        body = {"query": question, "user_id": tenant, "k": 6, "reinforce": False}
        matches = http.post("/memory/query", json=body).json()["matches"]
        out.append([(m["id"], m["content"]) for m in matches])
    return out


def export(http: httpx.Client, tenant: str) -> list[dict]:
    response = http.get("/export", params={"user_id": tenant})
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in response.text.splitlines()]
