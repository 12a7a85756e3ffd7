"""Retrieval quality through the public REST API, on data nobody here wrote (LoCoMo, SciFact).

    python -m bench.quality [--provider local] [--modes fulltext,dense,hybrid,full] [--limit-queries N]

Loads ../shared/data into a private stack (embedded servers, or DATABASE_URL / REDIS_URL) with
`POST /memory/batch`, waits until every memory is merged and counted, then asks every question with
`POST /memory/query` in each mode (the request's `retrieval` switches):

    fulltext  BM25 candidates only, ranked by them
    dense     vector candidates only, ranked by them
    hybrid    both, fused by Reciprocal Rank Fusion (k = 60)
    full      hybrid + waypoint expansion + the composite score (the default read path)

LoCoMo: each conversation its own tenant, every turn one memory ("Speaker: text", a shared photo's
caption appended, the session's time in its metadata), each session one batch with `sequence: true` (a
turn is linked to the next, as an agent storing a conversation would say), turn-level Recall@5 /
Recall@10 per question, overall and per category. SciFact: one tenant of "title. abstract" memories,
nDCG@10 and Recall@10. Questions are split by a hash of their id into a tuning part (80 %) and a
held-out part (20 %), reported separately; tune only on the first.
`--url` runs against a gateway that is already up (tenants are prefixed with a run id).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import math
import os
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.common import fresh_database, servers, stack
from bench.embedding_quality import DATA, LOCOMO_CATEGORIES, read_jsonl

MODES: dict[str, dict[str, Any]] = {
    "fulltext": {"lexical": True, "dense": False, "waypoints": False, "rank": "fusion"},
    "dense": {"lexical": False, "dense": True, "waypoints": False, "rank": "fusion"},
    "hybrid": {"lexical": True, "dense": True, "waypoints": False, "rank": "fusion"},
    "full": {"lexical": True, "dense": True, "waypoints": True, "rank": "composite"},
    # not in the default set: the query classification stage (dense search in the query's own sectors)
    "classified": {"lexical": True, "dense": True, "waypoints": True, "rank": "composite", "classify": True},
}
REQUEST_ITEMS = 2000


def held_out(question_id: str) -> bool:
    """A fixed fifth of the questions, by a hash of the id (stable across runs and machines)."""
    return hashlib.sha256(question_id.encode()).digest()[0] % 5 == 0


@dataclass
class Question:
    id: str
    tenant: str
    text: str
    gold: set[str]
    category: str = ""


@dataclass
class Corpus:
    name: str
    docs: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # tenant -> [(doc id, content)]
    questions: list[Question] = field(default_factory=list)
    # doc id -> the sequence it belongs to, in `docs` order (a conversation's session): stored as one batch
    # with `sequence: true`, so each turn is linked to the next
    sequence: dict[str, str] = field(default_factory=dict)
    when: dict[str, str] = field(default_factory=dict)  # doc id -> when it happened (ISO), if known


def load_locomo(data: Path, run: str, limit_queries: int) -> Corpus:
    corpus = Corpus("locomo")
    turns = read_jsonl(data / "locomo-dev" / "documents.jsonl")
    turns.sort(key=lambda t: (t["conversation_id"], t["session"], t["turn"]))
    for turn in turns:
        content = f"{turn['speaker']}: {turn['text']}"
        if turn.get("blip_caption"):
            content += f" [shares a photo: {turn['blip_caption']}]"
        corpus.docs.setdefault(f"{run}locomo-{turn['conversation_id']}", []).append((turn["id"], content))
        corpus.sequence[turn["id"]] = f"session {turn['session']}"
        corpus.when[turn["id"]] = turn["timestamp"]
    questions = [q for q in read_jsonl(data / "locomo-dev" / "queries.jsonl") if q["gold_ids"]]
    for q in questions[: limit_queries or None]:
        category = LOCOMO_CATEGORIES.get(q["category"], str(q["category"]))
        tenant = f"{run}locomo-{q['conversation_id']}"
        corpus.questions.append(Question(q["id"], tenant, q["question"], set(q["gold_ids"]), category))
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
    corpus.docs[tenant] = [(d["id"], f"{d['title']}. {d['text']}") for d in documents]
    corpus.questions = [Question(c["id"], tenant, c["question"], set(c["gold_ids"])) for c in claims]
    return corpus


def ingest(
    client: httpx.Client, corpus: Corpus, *, reuse: bool = False
) -> tuple[dict[str, dict[str, set[str]]], float]:
    """Store every document; returns, per tenant, memory id -> the doc ids with that content, and seconds.
    `reuse`: a tenant that already holds memories (an earlier run's, same `--run-id`) is asked as it is."""
    started = time.perf_counter()
    jobs = []
    for tenant, docs in corpus.docs.items():
        if reuse and client.get("/memory/all", params={"user_id": tenant, "l": 1}).json()["total"]:
            continue
        for label, run in itertools.groupby(docs, key=lambda doc: corpus.sequence.get(doc[0])):
            part = list(run)
            for start in range(0, len(part), REQUEST_ITEMS):
                batch = part[start : start + REQUEST_ITEMS]
                items = [
                    {"content": content, "metadata": {"doc_id": doc_id} | _when(corpus, doc_id)}
                    | ({"occurred_at": corpus.when[doc_id]} if doc_id in corpus.when else {})
                    for doc_id, content in batch
                ]
                body = {
                    "items": items,
                    "user_id": tenant,
                    "idempotency_key": f"{corpus.name}-{batch[0][0]}-{len(batch)}",
                    "sequence": label is not None,
                }
                response = client.post("/memory/batch", json=body)
                response.raise_for_status()
                jobs.append((tenant, response.json()["job_id"]))
    for tenant, job_id in jobs:
        while (job := client.get(f"/jobs/{job_id}", params={"user_id": tenant}).json())["status"] not in (
            "succeeded",
            "failed",
        ):
            time.sleep(0.5)
        if job["status"] == "failed":
            raise RuntimeError(f"ingest job failed: {job['error']}")
    for tenant in corpus.docs:  # merged into HNSW, linked, and counted for BM25
        while client.get("/sectors", params={"user_id": tenant}).json()["index"]["fresh_vectors"]:
            time.sleep(0.5)
    seconds = time.perf_counter() - started
    # The same text twice is one memory: it stands for every doc id with that text.
    doc_ids: dict[str, dict[str, set[str]]] = {}
    for tenant, docs in corpus.docs.items():
        by_content: dict[str, set[str]] = defaultdict(set)
        for doc_id, content in docs:
            by_content[" ".join(content.split())].add(doc_id)
        mapping: dict[str, set[str]] = {}
        offset = 0
        while True:
            page = client.get("/memory/all", params={"user_id": tenant, "u": offset, "l": 1000}).json()
            for memory in page["items"]:
                mapping[memory["id"]] = by_content.get(" ".join(memory["content"].split()), set()) | {
                    memory["metadata"].get("doc_id", "")
                }
            offset += len(page["items"])
            if not page["items"] or offset >= page["total"]:
                break
        doc_ids[tenant] = mapping
    return doc_ids, seconds


def _when(corpus: Corpus, doc_id: str) -> dict[str, str]:
    return {"timestamp": corpus.when[doc_id]} if doc_id in corpus.when else {}


def ask(client: httpx.Client, question: Question, mode: str, k: int = 10) -> tuple[list[str], float]:
    """The memory ids of the top k, and the request's milliseconds."""
    body = {
        "query": question.text,
        "k": k,
        "user_id": question.tenant,
        "filters": {"min_score": 0.0},
        "retrieval": MODES[mode],
        "reinforce": False,  # read-only: one mode's questions must not lift the salience the next mode sees
    }
    started = time.perf_counter()
    response = client.post("/memory/query", json=body)
    elapsed = (time.perf_counter() - started) * 1000
    response.raise_for_status()
    return [m["id"] for m in response.json()["matches"]], elapsed


def ranked_docs(memory_ids: list[str], mapping: dict[str, set[str]]) -> list[set[str]]:
    return [mapping.get(i, set()) for i in memory_ids]


def recall_at(ranked: list[set[str]], gold: set[str], k: int) -> float:
    found = set().union(*ranked[:k]) if ranked[:k] else set()
    return len(gold & found) / len(gold)


def ndcg_at_10(ranked: list[set[str]], gold: set[str]) -> float:
    dcg = sum(1.0 / math.log2(rank + 2) for rank, docs in enumerate(ranked[:10]) if docs & gold)
    ideal = sum(1.0 / math.log2(rank + 2) for rank in range(min(len(gold), 10)))
    return dcg / ideal


@dataclass
class Scores:
    values: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def add(self, name: str, value: float) -> None:
        self.values[name].append(value)

    def mean(self, name: str) -> float:
        rows = self.values.get(name, [])
        return sum(rows) / len(rows) if rows else math.nan

    def count(self, name: str) -> int:
        return len(self.values.get(name, []))


def evaluate(client: httpx.Client, corpus: Corpus, mapping: dict[str, dict[str, set[str]]], mode: str) -> Scores:
    scores = Scores()
    latencies = []
    for question in corpus.questions:
        memory_ids, ms = ask(client, question, mode)
        latencies.append(ms)
        ranked = ranked_docs(memory_ids, mapping[question.tenant])
        part = "held-out" if held_out(question.id) else "tune"
        if corpus.name == "locomo":
            metrics = {"R@5": recall_at(ranked, question.gold, 5), "R@10": recall_at(ranked, question.gold, 10)}
        else:
            metrics = {"nDCG@10": ndcg_at_10(ranked, question.gold), "R@10": recall_at(ranked, question.gold, 10)}
        for name, value in metrics.items():
            scores.add(f"{part}:{name}", value)
            scores.add(f"all:{name}", value)
            if question.category:
                scores.add(f"{part}:{question.category}:{name}", value)
    latencies.sort()
    scores.add("p50_ms", latencies[len(latencies) // 2])
    scores.add("p95_ms", latencies[int(len(latencies) * 0.95) - 1 if len(latencies) > 1 else 0])
    return scores


@contextlib.contextmanager
def gateway(args: argparse.Namespace) -> Iterator[str]:
    if args.url:
        yield args.url
        return
    os.environ["MNEMOFLOW_EMBEDDING_PROVIDER"] = args.provider
    with servers() as srv:
        url = fresh_database(srv.admin_url, "bench_quality")
        with stack(url, srv.redis_url, concurrency=args.concurrency) as base:
            yield base


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.quality", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--provider", default="local", choices=["synthetic", "local", "static"])
    parser.add_argument("--datasets", default="locomo,scifact", help="comma-separated (default %(default)s)")
    parser.add_argument(
        "--modes",
        default="fulltext,dense,hybrid,full",
        help=f"comma-separated, of {', '.join(MODES)} (default %(default)s)",
    )
    parser.add_argument("--limit-queries", type=int, default=0, help="first N questions of each set (0: all)")
    parser.add_argument("--limit-docs", type=int, default=0, help="SciFact: gold abstracts plus others up to N")
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes of the private stack")
    parser.add_argument("--url", help="use this running gateway instead of a private stack")
    parser.add_argument(
        "--run-id",
        help="with --url: prefix tenants with this id and ask an earlier run's store as it is (no reload)",
    )
    parser.add_argument("--data", type=Path, default=DATA, help="evaluation data root (default ../shared/data)")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown mode(s) {', '.join(sorted(unknown))}; choose from {', '.join(MODES)}")
    if args.run_id and not args.url:
        parser.error("--run-id needs --url (a private stack starts empty)")
    run = f"{args.run_id or 'q' + uuid.uuid4().hex[:6]}-" if args.url else ""
    corpora = []
    for name in [d.strip() for d in args.datasets.split(",") if d.strip()]:
        if name == "locomo":
            corpora.append(load_locomo(args.data, run, args.limit_queries))
        elif name == "scifact":
            corpora.append(load_scifact(args.data, run, args.limit_queries, args.limit_docs))
        else:
            parser.error(f"unknown dataset {name!r}: locomo or scifact")

    results: dict[tuple[str, str], Scores] = {}
    with gateway(args) as base, httpx.Client(base_url=base, timeout=300) as client:
        health = client.get("/health").json()["embedding"]
        print(f"provider {health['provider']} ({health['model']}, {health['dimensions']} dims) at {base}", flush=True)
        for corpus in corpora:
            mapping, seconds = ingest(client, corpus, reuse=bool(args.run_id))
            docs = sum(len(d) for d in corpus.docs.values())
            print(f"{corpus.name}: {docs:,} memories stored and settled in {seconds:.0f} s", flush=True)
            for mode in modes:
                results[(corpus.name, mode)] = scores = evaluate(client, corpus, mapping, mode)
                main_metric = "R@5" if corpus.name == "locomo" else "nDCG@10"
                print(
                    f"  {mode:<9} {main_metric} {scores.mean('all:' + main_metric):.3f} "
                    f"R@10 {scores.mean('all:R@10'):.3f}  (query p50 {scores.mean('p50_ms'):.1f} ms, "
                    f"p95 {scores.mean('p95_ms'):.1f} ms)",
                    flush=True,
                )
    report(corpora, modes, results, args.provider)


def report(corpora: list[Corpus], modes: list[str], results: dict[tuple[str, str], Scores], provider: str) -> None:
    print(f"\nretrieval quality through POST /memory/query, provider {provider} (tune part / held-out part)")
    for corpus in corpora:
        metrics = ["R@5", "R@10"] if corpus.name == "locomo" else ["nDCG@10", "R@10"]
        parts = ("tune", "held-out")
        print(f"\n{corpus.name}: {len(corpus.questions)} questions")
        print(f"{'mode':<10}" + "".join(f"{m + ' ' + p:>18}" for m in metrics for p in parts))
        for mode in modes:
            scores = results[(corpus.name, mode)]
            print(f"{mode:<10}" + "".join(f"{scores.mean(f'{p}:{m}'):>18.3f}" for m in metrics for p in parts))
        if corpus.name == "locomo":
            categories = sorted({q.category for q in corpus.questions})
            print("\n  per category, R@5 / R@10 on the tune part (questions)")
            print(f"  {'mode':<10}" + "".join(f"{c:>22}" for c in categories))
            for mode in modes:
                scores = results[(corpus.name, mode)]
                cells = [
                    f"{scores.mean(f'tune:{c}:R@5'):.3f} / {scores.mean(f'tune:{c}:R@10'):.3f} "
                    f"({scores.count(f'tune:{c}:R@5')})"
                    for c in categories
                ]
                print(f"  {mode:<10}" + "".join(f"{cell:>22}" for cell in cells))


if __name__ == "__main__":
    main()
