"""The evidence gate: how often a question about nothing in a store gets nothing, and an answerable one is blocked.

    python -m bench.gate [--datasets locomo,scifact] [--client plain] [--url URL] [--limit-queries N]

Loads the sets into a private stack as `--client` stores them (bench/quality_data.py; one copy), then asks, read-only,
k = 10, with `explain` and the gate off (`filters.min_evidence: 0`), so each match's trace carries its evidence's
parts (cosine, coverage, unknown names):

  in-store    every question in its own store (LoCoMo: its conversation's; SciFact: the abstracts')
  off-store   every LoCoMo question in the next conversation's store; with SciFact loaded, LoCoMo's questions in
              the SciFact store too
  foreign     SciFact's claims in the first LoCoMo conversation's store (its abstracts need not be loaded)

From those, offline, the gate at each min_evidence (the best evidence among a query's top 10 against the threshold):
the share of off-store questions that return something, of in-store ones blocked, and the recall left (a blocked
question finds nothing). `--tune`: the cosine floor, the unknown-name weight and min_evidence chosen leaving one
LoCoMo conversation out (the least off-store injection costing at most 0.5 pt of R@5 on the other four's
questions, scored on its own), held-out figures; then min_evidence alone, the floor and weight as shipped. Last, every
in-store and off-store question asked again at the shipped defaults (no min_evidence): the gate as it runs, over
every candidate and not only a top 10.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench import updates
from bench.common import gateway_at
from bench.embedding_quality import DATA, read_jsonl
from bench.quality import K, ndcg_at_10, other_store, recall_at
from bench.quality_data import CLIENTS, Question, load_locomo, load_scifact, store
from shared.retrieval.evidence import GateParams, evidence

SWEEP = (0.0, 0.1, 0.15, 0.18, 0.2, 0.22, 0.25, 0.3)
FLOORS = (0.05, 0.1, 0.15, 0.2, 0.25)
UNKNOWN_WEIGHTS = (0.0, 0.15, 0.3, 0.45)
MIN_EVIDENCE = tuple(round(0.05 + 0.01 * i, 2) for i in range(36))
MAX_R5_LOSS = 0.005  # tuning keeps the R@5 the gate costs at most this on the training conversations


@dataclass
class Asked:
    """One question asked in one store, gate off: what came back, with each match's evidence parts."""

    question: Question
    store: str
    ids: list[str]
    parts: list[tuple[float, float, float]] = field(default_factory=list)  # (cosine, coverage, unknown share)
    ranked: list[list[str]] = field(default_factory=list)  # the evaluation documents each match is
    unknown: list[str] = field(default_factory=list)  # the question's names the store never saw

    def record(self, case: str) -> dict[str, Any]:
        q = self.question
        question = {"id": q.id, "tenant": q.tenant, "text": q.text, "gold": sorted(q.gold), "category": q.category}
        asked = {"store": self.store, "ids": self.ids, "parts": self.parts, "ranked": self.ranked}
        return {"case": case, "question": question, "unknown": self.unknown} | asked

    @staticmethod
    def of(line: dict[str, Any]) -> Asked:
        q = line["question"]
        question = Question(q["id"], q["tenant"], q["text"], set(q["gold"]), q["category"])
        parts = [(c, cov, unk) for c, cov, unk in line["parts"]]
        return Asked(question, line["store"], line["ids"], parts, line["ranked"], line["unknown"])

    def best(self, params: GateParams) -> float:
        return max((evidence(c, cov, unk, params) for c, cov, unk in self.parts), default=-math.inf)


def ask(
    client: httpx.Client,
    question: Question,
    tenant: str,
    mapping: dict[str, dict[str, set[str]]] | None = None,
    *,
    gate_off: bool = True,
) -> Asked:
    body: dict[str, Any] = {"query": question.text, "k": K, "user_id": tenant, "reinforce": False}
    if gate_off:
        body |= {"explain": True, "filters": {"min_evidence": 0}}
    response = client.post("/memory/query", json=body)
    response.raise_for_status()
    matches = response.json()["matches"]
    parts = [
        (
            m["trace"]["components"]["cosine"],
            m["trace"]["components"].get("coverage", 0.0),
            m["trace"]["components"].get("unknown_names", 0.0),
        )
        for m in matches
        if m.get("trace")
    ]
    ids = [m["id"] for m in matches]
    ranked = [sorted(mapping.get(tenant, {}).get(i, set())) for i in ids] if mapping else []
    return Asked(question, tenant, ids, parts, ranked, response.json().get("unknown_names") or [])


@dataclass
class Runs:
    """Every question of a set, asked in its own store and (where there is one) in a store not its own."""

    name: str
    inside: list[Asked] = field(default_factory=list)
    outside: dict[str, list[Asked]] = field(default_factory=dict)  # by what the off-store case is


def passes(a: Asked, params: GateParams) -> bool:
    """Whether the question returns something with the gate at `params` (min_evidence 0: off)."""
    return bool(a.ids) and (params.min_evidence <= 0 or a.best(params) >= params.min_evidence)


def blocked(asked: Sequence[Asked], params: GateParams) -> float:
    """The share the gate blocks (of all; those min_score left nothing are not the gate's)."""
    return sum(bool(a.ids) and not passes(a, params) for a in asked) / len(asked) if asked else math.nan


def injected(asked: Sequence[Asked], params: GateParams) -> float:
    return sum(passes(a, params) for a in asked) / len(asked) if asked else math.nan


def quality(runs: Runs, params: GateParams | None) -> tuple[float, float]:
    """R@5 / R@10 (nDCG@10 / R@10 on SciFact) with the gate applied offline (None: off)."""
    first: list[float] = []
    second: list[float] = []
    for a in runs.inside:
        ranked = [set(docs) for docs in a.ranked] if params is None or passes(a, params) else []
        gold = a.question.gold
        first.append(ndcg_at_10(ranked, gold) if runs.name == "scifact" else recall_at(ranked, gold, 5))
        second.append(recall_at(ranked, a.question.gold, 10))
    return sum(first) / len(first), sum(second) / len(second)


def sweep(runs: Runs, base: GateParams) -> None:
    lead = "nDCG@10" if runs.name == "scifact" else "R@5"
    cases = list(runs.outside)
    print(f"\n{runs.name}: the evidence gate (floor {base.cosine_floor}, unknown names {base.unknown_name_weight})")
    print(f"| min_evidence | in-store blocked | {' | '.join(f'{c} injected' for c in cases)} | {lead} | R@10 |")
    print("| --- | --- |" + " --- |" * len(cases) + " --- | --- |")
    for threshold in SWEEP:
        params = GateParams(threshold, base.cosine_floor, unknown_name_weight=base.unknown_name_weight)
        shares = " | ".join(f"{injected(runs.outside[c], params):.1%}" for c in cases)
        first, second = quality(runs, params if threshold else None)
        print(f"| {threshold:.2f} | {blocked(runs.inside, params):.1%} | {shares} | {first:.4f} | {second:.4f} |")


def choose(inside: Sequence[Asked], outside: Sequence[Asked], grid: Sequence[tuple[float, float]]) -> GateParams:
    """Of the (floor, unknown-name weight) pairs of `grid` and each min_evidence, the one with the least off-store
    injection that costs the in-store questions at most MAX_R5_LOSS of R@5 (a blocked question finds nothing);
    ties to the lower threshold, then the first pair."""
    best: tuple[float, GateParams] | None = None
    lost = {id(a): recall_at([set(d) for d in a.ranked], a.question.gold, 5) for a in inside}
    for floor, weight in grid:
        base = GateParams(0.0, floor, unknown_name_weight=weight)
        inner = [(a.best(base), lost[id(a)]) for a in inside if a.ids]  # nothing returned: nothing to block
        outer = [a.best(base) for a in outside if a.ids]
        for threshold in MIN_EVIDENCE:
            if sum(r for v, r in inner if v < threshold) / len(inside) > MAX_R5_LOSS:
                break
            share = sum(v >= threshold for v in outer) / len(outside)
            if best is None or share < best[0] - 1e-12:
                best = (share, GateParams(threshold, floor, unknown_name_weight=weight))
    return best[1] if best else GateParams(0.0)


def leave_one_out(locomo: Runs, grid: Sequence[tuple[float, float]]) -> None:
    """Tune on four conversations' questions, score on the fifth's (in its store, and in the next one's)."""
    conversations = sorted({a.question.tenant for a in locomo.inside})
    outside = locomo.outside["off-store"]
    print(f"\nleave one conversation out: chosen on four, scored on the fifth ({len(grid)} floor/weight pairs)")
    print("| held out | floor | unknown names | min_evidence | blocked (held out) | injected (held out) | R@5 lost |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    totals = [0.0, 0.0, 0.0, 0, 0]
    for held in conversations:
        train_in = [a for a in locomo.inside if a.question.tenant != held]
        train_out = [a for a in outside if a.question.tenant != held]
        params = choose(train_in, train_out, grid)
        test = Runs("locomo", [a for a in locomo.inside if a.question.tenant == held])
        test_out = [a for a in outside if a.question.tenant == held]
        b, i = blocked(test.inside, params), injected(test_out, params)
        lost = quality(test, None)[0] - quality(test, params)[0]
        totals[0] += b * len(test.inside)
        totals[1] += i * len(test_out)
        totals[2] += lost * len(test.inside)
        totals[3] += len(test.inside)
        totals[4] += len(test_out)
        print(
            f"| {held} | {params.cosine_floor} | {params.unknown_name_weight} | {params.min_evidence:.2f} | "
            f"{b:.1%} | {i:.1%} | {lost:.4f} |"
        )
    print(
        f"| all (pooled) | | | | {totals[0] / totals[3]:.1%} | {totals[1] / totals[4]:.1%} | "
        f"{totals[2] / totals[3]:.4f} |"
    )


def updates_runs(base: str, client: httpx.Client, data: Path, run: str) -> Runs:
    """updates-dev as bench.updates stores it (a plain client, turn by turn); each case's question in its store, and
    every off-topic question in every case's store."""
    cases = [
        updates.Case(**{k: row[k] for k in ("id", "old", "new", "question")})
        for row in read_jsonl(data / "updates-dev" / "cases.jsonl")
    ]
    context = json.loads((data / "updates-dev" / "context.json").read_text())
    now = datetime.now(UTC)
    tenants = [f"{run}updates-{case.id}" for case in cases]
    mapping: dict[str, dict[str, set[str]]] = {}
    for n, (case, tenant) in enumerate(zip(cases, tenants, strict=True)):
        ids = updates.store_case(base, tenant, updates.conversation(n, case, context["filler"], now))
        mapping[tenant] = {ids[case.new]: {"new"}, ids[case.old]: {"old"}}
    updates.settled(client, tenants)
    runs = Runs("updates")
    runs.inside = [
        ask(client, Question(case.id, tenant, case.question, {"new"}), tenant, mapping)
        for case, tenant in zip(cases, tenants, strict=True)
    ]
    runs.outside["off-topic"] = [
        ask(client, Question(f"off-{i}", "", text, set()), tenant)
        for tenant in tenants
        for i, text in enumerate(context["off_topic"])
    ]
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.gate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--provider", default="local", choices=["synthetic", "local", "static"])
    parser.add_argument(
        "--client", default="plain", choices=CLIENTS, help="how memories are stored (default %(default)s)"
    )
    parser.add_argument("--datasets", default="locomo", help="locomo, or locomo,scifact (default %(default)s)")
    parser.add_argument("--tune", action="store_true", help="also choose the knobs leaving one conversation out")
    parser.add_argument("--limit-queries", type=int, default=0, help="first N questions of each set (0: all)")
    parser.add_argument("--url", help="use this running gateway instead of a private stack")
    parser.add_argument("--dump", type=Path, help="write every question asked, gate off, as JSON lines")
    parser.add_argument("--load", type=Path, help="analyse an earlier --dump offline (no stack, no re-asking)")
    parser.add_argument("--data", type=Path, default=DATA, help="evaluation data root (default ../shared/data)")
    args = parser.parse_args()
    if args.load:
        runs = load(args.load)
        analyse(runs, tune=args.tune)
        return
    run = f"g{uuid.uuid4().hex[:6]}-" if args.url else ""
    names = [d.strip() for d in args.datasets.split(",") if d.strip()]
    if "locomo" not in names:
        parser.error("the off-store cases need LoCoMo's stores: --datasets locomo[,scifact]")
    locomo = load_locomo(args.data, run, args.limit_queries)
    claims = load_scifact(args.data, run, args.limit_queries, 0)
    corpora = [locomo] + ([claims] if "scifact" in names else [])
    with (
        gateway_at(args.url, provider=args.provider, database="bench_gate") as base,
        httpx.Client(base_url=base, timeout=300) as client,
    ):
        print(f"gate bench at {base}, client {args.client}", flush=True)
        mappings: dict[str, dict[str, set[str]]] = {}
        for corpus in corpora:
            mapping, seconds = store(client, corpus, args.client, [""])
            mappings |= mapping
            print(f"{corpus.name}: {sum(len(d) for d in corpus.docs.values()):,} memories stored in {seconds:.0f} s")
        stores = sorted(locomo.docs)
        runs = {c.name: Runs(c.name) for c in corpora}
        for corpus in corpora:
            runs[corpus.name].inside = [ask(client, q, q.tenant, mappings) for q in corpus.questions]
        asked_out = runs["locomo"].outside
        asked_out["off-store"] = [ask(client, q, other_store(q, stores) or stores[0]) for q in locomo.questions]
        asked_out["SciFact claims"] = [ask(client, q, stores[0]) for q in claims.questions]
        if "scifact" in runs:
            (scifact_store,) = claims.docs
            runs["scifact"].outside["LoCoMo questions"] = [ask(client, q, scifact_store) for q in locomo.questions]
        runs["updates"] = updates_runs(base, client, args.data, run)
        if args.dump:
            with args.dump.open("w") as out:
                for r in runs.values():
                    for case, asked in [("in-store", r.inside), *r.outside.items()]:
                        out.writelines(json.dumps({"set": r.name} | a.record(case)) + "\n" for a in asked)
        analyse(runs, tune=args.tune)
        print("\nat the shipped defaults, asked again (every candidate weighed, not only a top 10)")
        for name, r in runs.items():
            inside = [ask(client, a.question, a.store, gate_off=False) for a in r.inside]
            none = sum(not a.ids for a in inside) / len(inside)
            print(f"  {name} in-store: nothing returned {none:.1%}")
            for case, asked in r.outside.items():
                again = [ask(client, a.question, a.store, gate_off=False) for a in asked]
                print(f"  {name} {case}: something returned {sum(bool(a.ids) for a in again) / len(again):.1%}")


def analyse(runs: dict[str, Runs], *, tune: bool) -> None:
    shipped = GateParams()
    for r in runs.values():
        sweep(r, shipped)
        sweep(r, replace(shipped, unknown_name_weight=0.0))  # the names' knob, on every set
    if tune:  # every knob free; then the floor and the names' weight as shipped, min_evidence alone tuned
        leave_one_out(runs["locomo"], list(itertools.product(FLOORS, UNKNOWN_WEIGHTS)))
        leave_one_out(runs["locomo"], [(shipped.cosine_floor, shipped.unknown_name_weight)])


def load(path: Path) -> dict[str, Runs]:
    runs: dict[str, Runs] = {}
    for text in path.read_text().splitlines():
        line = json.loads(text)
        r = runs.setdefault(line["set"], Runs(line["set"]))
        asked = Asked.of(line)
        if line["case"] == "in-store":
            r.inside.append(asked)
        else:
            r.outside.setdefault(line["case"], []).append(asked)
    return runs


if __name__ == "__main__":
    main()
