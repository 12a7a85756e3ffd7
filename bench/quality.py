"""Retrieval quality through the public REST API, on data nobody here wrote (LoCoMo, SciFact), used as users use it.

    python -m bench.quality [--client native|plain|session|batch] [--modes full,fulltext,dense,hybrid]

Loads ../shared/data into a private stack (embedded servers, or DATABASE_URL / REDIS_URL) as the chosen kind of
client would (bench/quality_data.py), waits until every memory is merged and counted, and asks every question
with `POST /memory/query`, k = 10, at the shipped defaults (no `min_score`, no switches):

  used    the product's figure. Each store is loaded twice. On one copy the even-numbered questions are asked
          first (reinforcement on, as a default query does; unscored), their reinforcement is let land (it is
          written after the response, in batches), then the odd-numbered ones are asked (reinforcement on) and
          scored; on the other copy the reverse. Every question is scored once, on a store the other half used.
  fresh   every question read-only (`reinforce: false`) on a fresh copy, before any use.

`--modes` adds read-only ablations of the read path (the request's `retrieval` switches):

    fulltext  BM25 candidates only, ranked by them
    dense     vector candidates only, ranked by them
    hybrid    both, fused by Reciprocal Rank Fusion (k = 60)
    full      hybrid + waypoint expansion + the composite score (= fresh)

LoCoMo: each conversation its own tenant, every turn one memory ("Speaker: text", a shared photo's caption
appended), turn-level Recall@5 / Recall@10 per question, overall and per category. SciFact: one tenant of
"title. abstract" memories, nDCG@10 and Recall@10.
Also printed, at defaults: blindness (the share of questions that return no memory at all) and off-store
injection (the share of a conversation's questions, asked in another conversation's store, or of SciFact's
claims asked in a conversation's store, that return anything).
`--url` runs against a gateway that is already up (tenants are prefixed with a run id).
"""

from __future__ import annotations

import argparse
import math
import time
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.common import gateway_at
from bench.embedding_quality import DATA
from bench.quality_data import CLIENTS, Corpus, Question, load_locomo, load_scifact, memories, store

MODES: dict[str, dict[str, Any]] = {
    "fulltext": {"lexical": True, "dense": False, "waypoints": False, "rank": "fusion"},
    "dense": {"lexical": False, "dense": True, "waypoints": False, "rank": "fusion"},
    "hybrid": {"lexical": True, "dense": True, "waypoints": False, "rank": "fusion"},
    "full": {"lexical": True, "dense": True, "waypoints": True, "rank": "composite"},
    # not in the default set: the query classification stage (dense search in the query's own sectors)
    "classified": {"lexical": True, "dense": True, "waypoints": True, "rank": "composite", "classify": True},
}
K = 10


def ask(
    client: httpx.Client,
    question: Question,
    tenant: str,
    *,
    mode: str = "",
    reinforce: bool = True,
    filters: dict[str, float] | None = None,
) -> tuple[list[str], float]:
    """The memory ids a query at the defaults returns (k = 10; `mode` sets the stage switches of an ablation,
    `filters` a gate of its own: `min_score`, `min_evidence`), and the request's milliseconds. `reinforce` True: the
    request leaves the field out, as a plain client does."""
    body: dict[str, Any] = {"query": question.text, "k": K, "user_id": tenant}
    if mode:
        body["retrieval"] = MODES[mode]
    if filters:
        body["filters"] = filters
    if not reinforce:
        body["reinforce"] = False
    started = time.perf_counter()
    response = client.post("/memory/query", json=body)
    elapsed = (time.perf_counter() - started) * 1000
    response.raise_for_status()
    return [m["id"] for m in response.json()["matches"]], elapsed


def recall_at(ranked: list[set[str]], gold: set[str], k: int) -> float:
    found = set().union(*ranked[:k]) if ranked[:k] else set()
    return len(gold & found) / len(gold)


def ndcg_at_10(ranked: list[set[str]], gold: set[str]) -> float:
    dcg = sum(1.0 / math.log2(rank + 2) for rank, docs in enumerate(ranked[:10]) if docs & gold)
    ideal = sum(1.0 / math.log2(rank + 2) for rank in range(min(len(gold), 10)))
    return dcg / ideal


def metrics_of(corpus: Corpus) -> tuple[str, str]:
    return ("R@5", "R@10") if corpus.name == "locomo" else ("nDCG@10", "R@10")


@dataclass
class Scores:
    values: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    latencies: list[float] = field(default_factory=list)

    def add(self, name: str, value: float) -> None:
        self.values[name].append(value)

    def mean(self, name: str) -> float:
        rows = self.values.get(name, [])
        return sum(rows) / len(rows) if rows else math.nan

    def count(self, name: str) -> int:
        return len(self.values.get(name, []))

    def score(self, corpus: Corpus, question: Question, memory_ids: list[str], mapping: dict[str, set[str]]) -> None:
        ranked = [mapping.get(i, set()) for i in memory_ids]
        values = {"R@10": recall_at(ranked, question.gold, 10)}
        if corpus.name == "locomo":
            values["R@5"] = recall_at(ranked, question.gold, 5)
        else:
            values["nDCG@10"] = ndcg_at_10(ranked, question.gold)
        for name, value in values.items():
            self.add(f"all:{name}", value)
            if question.category:
                self.add(f"{question.category}:{name}", value)
        self.add("blind", 0.0 if memory_ids else 1.0)

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else math.nan


def ask_all(
    client: httpx.Client,
    corpus: Corpus,
    mapping: dict[str, dict[str, set[str]]],
    mode: str = "",
    copy: str = "",
    *,
    reinforce: bool = False,
) -> Scores:
    """Every question, scored, on a copy (the first: a fresh store), read-only unless `reinforce` (read-only
    queries change nothing)."""
    scores = Scores()
    for question in corpus.questions:
        tenant = corpus.copy_tenant(question.tenant, copy)
        memory_ids, ms = ask(client, question, tenant, mode=mode, reinforce=reinforce)
        scores.latencies.append(ms)
        scores.score(corpus, question, memory_ids, mapping[tenant])
    return scores


def used(client: httpx.Client, corpus: Corpus, mapping: dict[str, dict[str, set[str]]]) -> Scores:
    """The used-store protocol: on copy "" the even-numbered questions reinforce and the odd ones are scored,
    on copy "b" the reverse; every query at the defaults (reinforcement on)."""
    scores = Scores()
    halves = (
        [q for i, q in enumerate(corpus.questions) if i % 2 == 0],
        [q for i, q in enumerate(corpus.questions) if i % 2 == 1],
    )
    for copy, (first, second) in (("", halves), ("b", halves[::-1])):
        started = datetime.now().astimezone()
        returned: dict[str, set[str]] = defaultdict(set)
        for question in first:
            tenant = corpus.copy_tenant(question.tenant, copy)
            memory_ids, _ = ask(client, question, tenant)
            returned[tenant].update(memory_ids)
        settle_reinforcement(client, returned, started)
        for question in second:
            tenant = corpus.copy_tenant(question.tenant, copy)
            memory_ids, ms = ask(client, question, tenant)
            scores.latencies.append(ms)
            scores.score(corpus, question, memory_ids, mapping[tenant])
    return scores


def settle_reinforcement(
    client: httpx.Client, returned: dict[str, set[str]], since: datetime, wait: float = 120
) -> None:
    """Wait until every memory the queries returned was seen again after `since` (their reinforcement landed)."""
    deadline = time.monotonic() + wait
    for tenant, ids in returned.items():
        while True:
            seen = {m["id"] for m in memories(client, tenant) if datetime.fromisoformat(m["last_seen_at"]) >= since}
            if ids <= seen:
                break
            if time.monotonic() > deadline:
                print(f"  warning: {len(ids - seen)} reinforcements of {tenant} not applied after {wait:.0f} s")
                break
            time.sleep(0.5)


def injection(client: httpx.Client, questions: Sequence[Question], stores: Sequence[str]) -> float:
    """The share of questions that return anything when asked (read-only, at the defaults) in a store that is not
    theirs: each question in the next store of `stores` after its own (or the first, if its own is not there)."""
    if not questions:
        return math.nan
    answered = 0
    for question in questions:
        other = other_store(question, stores)
        if other is None:
            return math.nan
        memory_ids, _ = ask(client, question, other, reinforce=False)
        answered += bool(memory_ids)
    return answered / len(questions)


def other_store(question: Question, stores: Sequence[str]) -> str | None:
    """The store after the question's own in `stores` (the first, if its own is not there); None if there is none."""
    if not stores:
        return None
    own = stores.index(question.tenant) if question.tenant in stores else -1
    other = stores[(own + 1) % len(stores)]
    return None if other == question.tenant else other


GATES = {
    "min_score": (0.0, 0.05, 0.1, 0.15, 0.2, 0.3),  # the gate on relevance, the evidence gate off
    "min_evidence": (0.0, 0.1, 0.15, 0.2, 0.22, 0.25, 0.3),  # the evidence gate, min_score at its default
}


def gate_sweep(client: httpx.Client, corpus: Corpus, stores: Sequence[str], gate: str) -> None:
    """Blindness and off-store injection at each of GATES[gate], asked for real (read-only, k = 10): the gate runs
    over every candidate, not over a top 10 ranked without it."""
    print(f"\n{corpus.name}: the gate {gate} | blind | off-store injection", flush=True)
    for threshold in GATES[gate]:
        filters = {gate: threshold} | ({"min_evidence": 0.0} if gate == "min_score" else {})
        blind = injected = foreign = 0
        for q in corpus.questions:
            blind += not ask(client, q, q.tenant, reinforce=False, filters=filters)[0]
            other = other_store(q, stores)
            if other is not None:
                foreign += 1
                injected += bool(ask(client, q, other, reinforce=False, filters=filters)[0])
        share = f"{injected / foreign:.1%}" if foreign else "-"
        print(f"| {threshold:.2f} | {blind / len(corpus.questions):.1%} | {share} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.quality", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--provider", default="local", choices=["synthetic", "local", "static"])
    parser.add_argument(
        "--client", default="native", choices=CLIENTS, help="how memories are stored (default %(default)s)"
    )
    parser.add_argument("--datasets", default="locomo,scifact", help="comma-separated (default %(default)s)")
    parser.add_argument(
        "--modes", default="", help=f"read-only ablations to add, comma-separated, of {', '.join(MODES)}"
    )
    parser.add_argument("--no-usage", action="store_true", help="skip the used-store protocol (one copy, fresh only)")
    parser.add_argument(
        "--gate-sweep",
        action="store_true",
        help="also print blindness and injection over a range of min_score, then of min_evidence",
    )
    parser.add_argument(
        "--foreign-claims", action="store_true", help="also ask SciFact's claims in a LoCoMo store (not loading it)"
    )
    parser.add_argument("--limit-queries", type=int, default=0, help="first N questions of each set (0: all)")
    parser.add_argument("--limit-docs", type=int, default=0, help="SciFact: gold abstracts plus others up to N")
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes of the private stack")
    parser.add_argument("--url", help="use this running gateway instead of a private stack")
    parser.add_argument(
        "--run-id",
        help="with --url: prefix tenants with this id and ask an earlier run's store as it is (no reload; "
        "with the used-store protocol only once)",
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
    copies = [""] if args.no_usage else ["", "b"]

    results: dict[tuple[str, str], Scores] = {}
    injected: dict[str, float] = {}
    with (
        gateway_at(args.url, provider=args.provider, database="bench_quality", concurrency=args.concurrency) as base,
        httpx.Client(base_url=base, timeout=300) as client,
    ):
        health = client.get("/health").json()["embedding"]
        print(f"provider {health['provider']} ({health['model']}, {health['dimensions']} dims) at {base}", flush=True)
        print(f"client {args.client}: {CLIENT_NOTES[args.client]}", flush=True)
        mappings = {}
        for corpus in corpora:
            mappings[corpus.name], seconds = store(client, corpus, args.client, copies, reuse=bool(args.run_id))
            docs = sum(len(d) for d in corpus.docs.values())
            print(f"{corpus.name}: {docs:,} memories x {len(copies)} copies stored and settled in {seconds:.0f} s")
        for corpus in corpora:  # read-only first: it changes nothing the used-store protocol sees
            mapping = mappings[corpus.name]
            results[(corpus.name, "fresh")] = scores = ask_all(client, corpus, mapping)
            line(corpus, "fresh", scores)
            for mode in modes:
                results[(corpus.name, mode)] = scores = ask_all(client, corpus, mapping, mode)
                line(corpus, mode, scores)
        locomo_stores = sorted(t for c in corpora if c.name == "locomo" for t in c.docs)
        if not locomo_stores:  # SciFact alone: its claims are asked in one conversation's store
            foreign = load_locomo(args.data, run, 0)
            foreign.docs = dict(list(foreign.docs.items())[:1])
            store(client, foreign, "native", [""], reuse=bool(args.run_id))
            locomo_stores = list(foreign.docs)
        for corpus in corpora:  # a conversation's questions in the next conversation's store; claims in one
            injected[corpus.name] = injection(client, corpus.questions, locomo_stores)
            for gate in GATES if args.gate_sweep else ():
                gate_sweep(client, corpus, locomo_stores, gate)
        if args.foreign_claims and "scifact" not in {c.name for c in corpora}:
            claims = load_scifact(args.data, run, args.limit_queries, 0).questions
            injected["SciFact claims"] = injection(client, claims, locomo_stores)
        if not args.no_usage:
            for corpus in corpora:
                results[(corpus.name, "used")] = scores = used(client, corpus, mappings[corpus.name])
                line(corpus, "used", scores)
    report(corpora, ["used", "fresh", *modes] if not args.no_usage else ["fresh", *modes], results, injected, args)


CLIENT_NOTES = {
    "native": "each session one /memory/batch with sequence and occurred_at",
    "plain": "turns one by one through /memory/add with metadata {session_id, timestamp}",
    "session": "turns one by one through /memory/add with metadata {session_id}",
    "batch": "one plain /memory/batch per conversation (no sequence, time or key)",
}


def line(corpus: Corpus, mode: str, scores: Scores) -> None:
    first, second = metrics_of(corpus)
    print(
        f"  {corpus.name} {mode:<9} {first} {scores.mean('all:' + first):.3f} {second} "
        f"{scores.mean('all:' + second):.3f}  blind {scores.mean('blind'):.1%}  "
        f"(query p50 {scores.percentile(0.5):.1f} ms, p95 {scores.percentile(0.95):.1f} ms)",
        flush=True,
    )


def report(
    corpora: list[Corpus],
    modes: list[str],
    results: dict[tuple[str, str], Scores],
    injected: dict[str, float],
    args: argparse.Namespace,
) -> None:
    print(f"\nretrieval quality through POST /memory/query, provider {args.provider}, client {args.client}, k = {K}")
    if "SciFact claims" in injected:
        print(f"SciFact's claims asked in a LoCoMo store: {injected['SciFact claims']:.1%} return something")
    for corpus in corpora:
        first, second = metrics_of(corpus)
        print(f"\n{corpus.name}: {len(corpus.questions)} questions")
        print(f"| run | {first} | {second} | blind | p95 ms |")
        print("| --- | --- | --- | --- | --- |")
        for mode in modes:
            s = results[(corpus.name, mode)]
            print(
                f"| {mode} | {s.mean('all:' + first):.3f} | {s.mean('all:' + second):.3f} | "
                f"{s.mean('blind'):.1%} | {s.percentile(0.95):.1f} |"
            )
        if not math.isnan(injected.get(corpus.name, math.nan)):
            print(
                f"off-store injection: {injected[corpus.name]:.1%} of its questions, asked in another store, "
                "return something"
            )
        if corpus.name == "locomo":
            categories = sorted({q.category for q in corpus.questions})
            print(f"\n| {corpus.name} R@5 / R@10 | " + " | ".join(categories) + " |")
            print("| --- |" + " --- |" * len(categories))
            for mode in modes:
                s = results[(corpus.name, mode)]
                cells = [
                    f"{s.mean(f'{c}:R@5'):.3f} / {s.mean(f'{c}:R@10'):.3f} ({s.count(f'{c}:R@5')})" for c in categories
                ]
                print(f"| {mode} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
