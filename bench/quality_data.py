"""The evaluation sets as `bench.quality` stores them, and how each kind of client stores them.

Clients (`--client`):

    native   each LoCoMo session one `POST /memory/batch` with `sequence: true`, every turn with its
             `occurred_at` (what a client that speaks Mnemoflow's own fields sends)
    plain    every turn through `POST /memory/add`, one by one and in order, with only `content` and
             `metadata: {session_id, timestamp}` (what OpenMemory's and mem0's clients send)
    session  the same with `metadata: {session_id}` alone
    batch    every turn of a conversation in one plain `/memory/batch`: no `sequence`, no time, no key

SciFact has no reading order and no time: `native` and `batch` store it in batches, `plain` and `session` one
abstract at a time. A shared photo's caption (`image_caption`) is stored with its turn, as a client that has the
caption would.
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.embedding_quality import LOCOMO_CATEGORIES, read_jsonl
from shared.text import fact_key, normalize_content

CLIENTS = ("native", "plain", "session", "batch")
REQUEST_ITEMS = 2000


@dataclass
class Question:
    id: str
    tenant: str
    text: str
    gold: set[str]
    category: str = ""
    conversation: str = ""


@dataclass
class Doc:
    id: str
    content: str
    session: str | None = None  # the conversation's session it belongs to (LoCoMo)
    when: str | None = None  # when it happened, ISO (LoCoMo)


@dataclass
class Corpus:
    name: str
    docs: dict[str, list[Doc]] = field(default_factory=dict)  # tenant -> documents in reading order
    questions: list[Question] = field(default_factory=list)

    def copy_tenant(self, tenant: str, copy: str) -> str:
        return tenant if not copy else f"{tenant}:{copy}"


def load_locomo(data: Path, run: str, limit_queries: int) -> Corpus:
    corpus = Corpus("locomo")
    turns = read_jsonl(data / "locomo-dev" / "documents.jsonl")
    turns.sort(key=lambda t: (t["conversation_id"], t["session"], t["turn"]))
    for turn in turns:
        content = f"{turn['speaker']}: {turn['text']}"
        caption = turn.get("image_caption") or turn.get("blip_caption")
        if caption:
            content += f" [shares a photo: {caption}]"
        session = f"{turn['conversation_id']}-session-{turn['session']}"
        corpus.docs.setdefault(f"{run}locomo-{turn['conversation_id']}", []).append(
            Doc(turn["id"], content, session, turn["timestamp"])
        )
    questions = [q for q in read_jsonl(data / "locomo-dev" / "queries.jsonl") if q["gold_ids"]]
    for q in questions[: limit_queries or None]:
        category = LOCOMO_CATEGORIES.get(q["category"], str(q["category"]))
        tenant = f"{run}locomo-{q['conversation_id']}"
        corpus.questions.append(
            Question(q["id"], tenant, q["question"], set(q["gold_ids"]), category, q["conversation_id"])
        )
    return corpus


def load_scifact(data: Path, run: str, limit_queries: int, limit_docs: int) -> Corpus:
    corpus = Corpus("scifact")
    claims = [q for q in read_jsonl(data / "scifact-dev" / "queries.jsonl") if q["gold_ids"]][: limit_queries or None]
    documents = read_jsonl(data / "scifact-dev" / "documents.jsonl")
    if limit_docs:  # the asked claims' gold abstracts, then others up to the limit
        gold = {g for c in claims for g in c["gold_ids"]}
        documents = [d for d in documents if d["id"] in gold] + [d for d in documents if d["id"] not in gold]
        documents = documents[: max(limit_docs, len(gold))]
    tenant = f"{run}scifact"
    corpus.docs[tenant] = [Doc(d["id"], f"{d['title']}. {d['text']}") for d in documents]
    corpus.questions = [Question(c["id"], tenant, c["question"], set(c["gold_ids"])) for c in claims]
    return corpus


def _item(doc: Doc, client: str) -> dict[str, Any]:
    """One memory as this kind of client sends it."""
    if client == "native":
        item: dict[str, Any] = {"content": doc.content, "metadata": {"doc_id": doc.id}}
        if doc.when:
            item["metadata"]["timestamp"] = doc.when
            item["occurred_at"] = doc.when
        return item
    if client == "batch":
        return {"content": doc.content, "metadata": {"doc_id": doc.id}}
    metadata: dict[str, Any] = {}
    if doc.session:
        metadata["session_id"] = doc.session
    if doc.when and client == "plain":
        metadata["timestamp"] = doc.when
    return {"content": doc.content, "metadata": metadata} if metadata else {"content": doc.content}


def _store_batches(client: httpx.Client, corpus: Corpus, tenant: str, docs: list[Doc], how: str) -> list[str]:
    jobs = []
    groups = itertools.groupby(docs, key=lambda d: d.session) if how == "native" else [(None, iter(docs))]
    for session, run in groups:
        part = list(run)
        for start in range(0, len(part), REQUEST_ITEMS):
            batch = part[start : start + REQUEST_ITEMS]
            body = {
                "items": [_item(doc, how) for doc in batch],
                "user_id": tenant,
                "idempotency_key": f"{tenant}-{batch[0].id}-{len(batch)}",
                "sequence": session is not None,
            }
            response = client.post("/memory/batch", json=body)
            response.raise_for_status()
            jobs.append(response.json()["job_id"])
    return jobs


def _store_one_by_one(base_url: str, tenant: str, docs: list[Doc], how: str) -> None:
    with httpx.Client(base_url=base_url, timeout=300) as client:
        for doc in docs:
            response = client.post("/memory/add", json=_item(doc, how) | {"user_id": tenant})
            response.raise_for_status()


def store(
    client: httpx.Client, corpus: Corpus, how: str, copies: list[str], *, reuse: bool = False
) -> tuple[dict[str, dict[str, set[str]]], float]:
    """Store every document in each copy of each tenant as the client `how` would; returns, per stored tenant,
    memory id -> the doc ids with that content, and the seconds it took until every memory was settled
    (merged into the index, linked, counted for BM25). `reuse`: a tenant that already holds memories is kept."""
    started = time.perf_counter()
    tenants = [(corpus.copy_tenant(t, copy), docs) for t, docs in corpus.docs.items() for copy in copies]
    if reuse:
        tenants_to_load = [
            (t, d) for t, d in tenants if not client.get("/memory/all", params={"user_id": t, "l": 1}).json()["total"]
        ]
    else:
        tenants_to_load = tenants
    jobs: list[tuple[str, str]] = []
    if how in ("native", "batch"):
        for tenant, docs in tenants_to_load:
            jobs += [(tenant, job) for job in _store_batches(client, corpus, tenant, docs, how)]
    else:  # a conversation's turns in order; conversations side by side
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(lambda pair: _store_one_by_one(str(client.base_url), pair[0], pair[1], how), tenants_to_load))
    for tenant, job_id in jobs:
        while (job := client.get(f"/jobs/{job_id}", params={"user_id": tenant}).json())["status"] not in (
            "succeeded",
            "failed",
        ):
            time.sleep(0.5)
        if job["status"] == "failed":
            raise RuntimeError(f"ingest job failed: {job['error']}")
    for tenant, _ in tenants:
        while client.get("/sectors", params={"user_id": tenant}).json()["index"]["fresh_vectors"]:
            time.sleep(0.5)
    seconds = time.perf_counter() - started
    doc_ids: dict[str, dict[str, set[str]]] = {}
    for tenant, docs in tenants:
        # one fact twice (the same text, or the same words moved) is one memory: it stands for both
        by_content: dict[str, set[str]] = defaultdict(set)
        for doc in docs:
            by_content[fact_key(normalize_content(doc.content))].add(doc.id)
        doc_ids[tenant] = {
            memory["id"]: by_content.get(fact_key(normalize_content(memory["content"])), set())
            | ({memory["metadata"]["doc_id"]} if "doc_id" in memory["metadata"] else set())
            for memory in memories(client, tenant)
        }
    return doc_ids, seconds


def memories(client: httpx.Client, tenant: str) -> list[dict[str, Any]]:
    """Every memory of a tenant (GET /memory/all, page by page)."""
    found: list[dict[str, Any]] = []
    while True:
        page = client.get("/memory/all", params={"user_id": tenant, "u": len(found), "l": 1000}).json()
        found += page["items"]
        if not page["items"] or len(found) >= page["total"]:
            return found
