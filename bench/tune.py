"""Choosing the read path's knobs without fitting them: leave one conversation out.

    python -m bench.tune [--client native] [--datasets locomo,scifact]

Loads the evaluation sets through the public API (as `bench.quality --client ...` does, one copy), then asks
every question in-process (the gateway's read path, `Retriever`, read-only, k = 10, no gate) once at the
shipped defaults and once per alternative value of each knob in KNOBS, the others at their defaults.

Then, for each LoCoMo conversation, every knob is set to the value that scores best (mean R@5) on the *other*
conversations, and that combination scores the held-out one. The figure reported is those held-out scores put
together: what choosing by this script would give on conversations it has not seen. SciFact has no
conversations: five folds of its claims (by a hash of the id), chosen by nDCG@10 the same way.
A knob earns a default other than today's only if the folds of both sets choose it.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import httpx

from bench.common import fresh_database, servers, stack
from bench.embedding_quality import DATA
from bench.quality import ndcg_at_10, recall_at
from bench.quality_data import CLIENTS, Corpus, Question, load_locomo, load_scifact, store
from shared.api.query import QueryFilters, QueryRequest
from shared.config import Settings
from shared.db import Database, create_db_engine
from shared.embedding.factory import create_embedder
from shared.retrieval.params import RetrievalParams
from shared.retrieval.scoring import ScoringParams
from shared.retrieval.service import Retriever

# ScoringParams field -> the values tried besides the default (coordinate-wise: one knob at a time)
KNOBS: dict[str, tuple[float, ...]] = {
    "fusion_alpha": (0.6, 0.7, 0.8),
    "lexical_power": (1.5, 2.0, 2.5),
    "activation_weight": (0.35, 0.5, 0.65),
    "context_weight": (0.3, 0.4, 0.5),
    "period_weight": (0.35, 0.5, 0.7),
}

Config = tuple[tuple[str, float], ...]  # the knobs that differ from the defaults


def default_of(knob: str) -> float:
    """A knob's shipped value: a field of ScoringParams, else of RetrievalParams."""
    for params in (ScoringParams(), RetrievalParams()):
        if hasattr(params, knob):
            return float(getattr(params, knob))
    raise SystemExit(f"unknown knob {knob!r}: a field of ScoringParams or RetrievalParams")


def fold_of(corpus: Corpus, question: Question) -> str:
    if corpus.name == "locomo":
        return question.conversation
    return f"fold {hashlib.sha256(question.id.encode()).digest()[0] % 5}"


def main_metric(corpus: Corpus) -> str:
    return "R@5" if corpus.name == "locomo" else "nDCG@10"


class Evaluator:
    """Asks a corpus's questions in-process with a given set of knob values; caches per (config, question)."""

    def __init__(self, settings: Settings, database: Database, corpus: Corpus, mapping: dict[str, dict[str, set[str]]]):
        self.settings, self.db, self.corpus, self.mapping = settings, database, corpus, mapping
        self.embedder = create_embedder(settings)
        self.cache: dict[tuple[Config, str], dict[str, float]] = {}

    def retriever(self, config: Config) -> Retriever:
        retriever = Retriever(self.settings, self.embedder)
        scoring = {k: v for k, v in config if hasattr(retriever.scoring, k)}
        stages = {k: type(getattr(retriever.params, k))(v) for k, v in config if k not in scoring}
        retriever.scoring = replace(retriever.scoring, **scoring)  # type: ignore[arg-type]
        retriever.params = replace(retriever.params, **stages)
        retriever.candidates.params = retriever.params
        return retriever

    def scores(self, config: Config, questions: list[Question]) -> list[dict[str, float]]:
        missing = [q for q in questions if (config, q.id) not in self.cache]
        if missing:
            retriever = self.retriever(config)
            for q in missing:
                request = QueryRequest(query=q.text, k=10, reinforce=False, filters=QueryFilters(min_score=0.0))
                with self.db.reading(q.tenant) as session:
                    outcome = retriever.query(session, q.tenant, request)
                ranked = [self.mapping[q.tenant].get(str(c.id), set()) for c, _ in outcome.matches]
                if self.corpus.name == "locomo":
                    values = {"R@5": recall_at(ranked, q.gold, 5), "R@10": recall_at(ranked, q.gold, 10)}
                else:
                    values = {"nDCG@10": ndcg_at_10(ranked, q.gold), "R@10": recall_at(ranked, q.gold, 10)}
                self.cache[(config, q.id)] = values
        return [self.cache[(config, q.id)] for q in questions]

    def mean(self, config: Config, questions: list[Question], metric: str) -> float:
        rows = self.scores(config, questions)
        return sum(r[metric] for r in rows) / len(rows) if rows else math.nan


def pick(evaluator: Evaluator, questions: list[Question], metric: str) -> Config:
    """Each knob at its best value on these questions, the others at their defaults (coordinate-wise)."""
    chosen = []
    for knob, values in KNOBS.items():
        default = default_of(knob)
        best = max(
            values,
            key=lambda v: (
                round(evaluator.mean(() if v == default else ((knob, v),), questions, metric), 4),
                v == default,  # a tie keeps the default
            ),
        )
        if best != default:
            chosen.append((knob, best))
    return tuple(chosen)


def leave_one_out(evaluator: Evaluator, corpus: Corpus) -> None:
    metric = main_metric(corpus)
    folds: dict[str, list[Question]] = defaultdict(list)
    for q in corpus.questions:
        folds[fold_of(corpus, q)].append(q)
    held_out: list[tuple[Question, dict[str, float]]] = []
    default_rows: list[tuple[Question, dict[str, float]]] = []
    picks: dict[str, Config] = {}
    print(f"\n{corpus.name}: {len(folds)} folds, knobs picked on the other folds by {metric}")
    for name, questions in sorted(folds.items()):
        others = [q for q in corpus.questions if fold_of(corpus, q) != name]
        config = picks[name] = pick(evaluator, others, metric)
        rows = evaluator.scores(config, questions)
        held_out += list(zip(questions, rows, strict=True))
        default_rows += list(zip(questions, evaluator.scores((), questions), strict=True))
        chosen = ", ".join(f"{k}={v}" for k, v in config) or "the defaults"
        print(
            f"  {name:<10} ({len(questions)} questions): picked {chosen}; held out {metric} "
            f"{_mean(rows, metric):.3f} (defaults {evaluator.mean((), questions, metric):.3f})"
        )
    second = "R@10"
    print(f"\n| {corpus.name}, leave-one-out | {metric} | {second} |")
    print("| --- | --- | --- |")
    print(
        f"| knobs picked on the other folds | {_mean([r for _, r in held_out], metric):.3f} | "
        f"{_mean([r for _, r in held_out], second):.3f} |"
    )
    print(
        f"| the shipped defaults | {_mean([r for _, r in default_rows], metric):.3f} | "
        f"{_mean([r for _, r in default_rows], second):.3f} |"
    )
    categories = sorted({q.category for q in corpus.questions if q.category})
    if categories:
        print(f"\n| {corpus.name} held out, {metric} / {second} | " + " | ".join(categories) + " |")
        print("| --- |" + " --- |" * len(categories))
        for label, rows_of in (("picked on the other folds", held_out), ("shipped defaults", default_rows)):
            cells = []
            for c in categories:
                rows = [r for q, r in rows_of if q.category == c]
                cells.append(f"{_mean(rows, metric):.3f} / {_mean(rows, second):.3f} ({len(rows)})")
            print(f"| {label} | " + " | ".join(cells) + " |")
    print(f"\n{corpus.name}, each knob's alternatives on all questions ({metric}):")
    for knob, values in KNOBS.items():
        cells = []
        for v in values:
            alternative: Config = () if v == default_of(knob) else ((knob, v),)
            cells.append(f"{v}: {evaluator.mean(alternative, corpus.questions, metric):.3f}")
        print(f"  {knob:<18} " + "  ".join(cells))


def _mean(rows: list[dict[str, float]], metric: str) -> float:
    return sum(r[metric] for r in rows) / len(rows) if rows else math.nan


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.tune", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--provider", default="local", choices=["synthetic", "local", "static"])
    parser.add_argument("--client", default="native", choices=CLIENTS)
    parser.add_argument("--datasets", default="locomo,scifact")
    parser.add_argument("--limit-queries", type=int, default=0)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument(
        "--knobs",
        nargs="+",
        metavar="NAME=V1,V2,...",
        help="the knobs to try instead of the default set (fields of ScoringParams or RetrievalParams, with the"
        " default among the values), e.g. candidate_multiplier=4,6,8",
    )
    args = parser.parse_args()
    if args.knobs:
        KNOBS.clear()
        for entry in args.knobs:
            name, _, values = entry.partition("=")
            KNOBS[name] = tuple(float(v) for v in values.split(","))
            default_of(name)
    os.environ["MNEMOFLOW_EMBEDDING_PROVIDER"] = args.provider
    corpora: list[Corpus] = []
    for name in args.datasets.split(","):
        corpora.append(
            load_locomo(args.data, "", args.limit_queries)
            if name == "locomo"
            else load_scifact(args.data, "", args.limit_queries, 0)
        )
    with servers() as srv:
        url = fresh_database(srv.admin_url, "bench_tune")
        with stack(url, srv.redis_url) as base, httpx.Client(base_url=base, timeout=300) as client:
            mappings = {c.name: store(client, c, args.client, [""])[0] for c in corpora}
        settings = Settings(database_url=url, redis_url=srv.redis_url, embedding_provider=args.provider)
        database = Database(create_db_engine(settings, "mnemoflow.tune", pool_size=2))
        try:
            for corpus in corpora:
                leave_one_out(Evaluator(settings, database, corpus, mappings[corpus.name]), corpus)
        finally:
            database.dispose()


if __name__ == "__main__":
    main()
