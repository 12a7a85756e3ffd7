"""Raw dense-retrieval quality of embedding providers, straight from numpy (no database, no hybrid stage).

    python -m bench.embedding_quality [--providers synthetic,local,static] [--limit-queries N] [--limit-docs N]

LoCoMo (../shared/data/locomo-dev): each conversation its own store, every turn one document
"Speaker: text", each question asked in its conversation; turn-level Recall@5 and Recall@10 (share of a
question's gold turns in the top k) averaged over questions, overall and per category. Questions
without gold turns are skipped.
SciFact (../shared/data/scifact-dev): one store of "title text" documents; nDCG@10 (binary gains) and
Recall@10 averaged over claims.

Providers: `synthetic` (384-d hash vectors), `local` (MiniLM int8 ONNX), `static` (the model2vec model
at --static-path, default <data_dir>/models/minilm-static-256: `make static-model`), `tokenlearn` (the
`tokenlearn-static-model` package's own Rust encoder, if installed), or `LABEL=PATH` for any other
model2vec directory run by the `static` provider. Throughput is texts/s inside `embed` while indexing
(batches of --batch-size), on the threads each provider uses (see --local-threads; tokenizers may use
several threads: TOKENIZERS_PARALLELISM=false for one).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shared.embedding.base import EmbeddingProvider, normalize_rows

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


class TokenlearnEmbedder:
    """The `tokenlearn-static-model` package (64-d int8, 10k-cluster vocabulary) through its own encoder."""

    name = "tokenlearn"
    model = "tokenlearn-static-model"

    def __init__(self) -> None:
        import static_model  # the package's import name

        self._encode: Callable[[list[str]], Any] = static_model.get_embeddings
        self.dim = len(self._encode(["probe"])[0])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return normalize_rows(np.asarray(self._encode(list(texts)), dtype=np.float64))


def make_provider(spec: str, args: argparse.Namespace) -> tuple[str, EmbeddingProvider]:
    """(label, provider) for one --providers entry."""
    if spec == "synthetic":
        from shared.embedding.synthetic import SyntheticEmbedder

        return spec, SyntheticEmbedder(dim=384)
    if spec == "local":
        from shared.embedding.local import LocalOnnxEmbedder

        return spec, LocalOnnxEmbedder(threads=args.local_threads)
    if spec == "tokenlearn":
        return spec, TokenlearnEmbedder()
    from shared.embedding.static import StaticEmbedder

    if spec == "static":
        return spec, StaticEmbedder(args.static_path)
    if "=" in spec:
        label, path = spec.split("=", 1)
        return label, StaticEmbedder(Path(path))
    raise SystemExit(f"unknown provider {spec!r}: synthetic, local, static, tokenlearn or LABEL=PATH")


@dataclass
class Timer:
    texts: int = 0
    chars: int = 0
    seconds: float = 0.0

    def embed(self, provider: EmbeddingProvider, texts: list[str], batch_size: int) -> np.ndarray:
        chunks = []
        for start in range(0, len(texts), batch_size):
            batch = texts[start : start + batch_size]
            began = time.perf_counter()
            chunks.append(provider.embed(batch))
            self.seconds += time.perf_counter() - began
        self.texts += len(texts)
        self.chars += sum(len(t) for t in texts)
        return np.vstack(chunks) if chunks else np.zeros((0, provider.dim), dtype=np.float32)

    @property
    def rate(self) -> float:
        return self.texts / self.seconds if self.seconds else math.nan


@dataclass
class Result:
    metrics: dict[str, float] = field(default_factory=dict)
    per_category: dict[str, tuple[int, float, float]] = field(default_factory=dict)
    queries: int = 0
    docs: Timer = field(default_factory=Timer)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open() as handle:
        return [json.loads(line) for line in handle if line.strip()]


def top_k(queries: np.ndarray, docs: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k best documents per query, best first (ties: lower index first)."""
    scores = queries @ docs.T
    k = min(k, docs.shape[0])
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


def locomo(provider: EmbeddingProvider, args: argparse.Namespace) -> Result:
    documents = read_jsonl(args.data / "locomo-dev" / "documents.jsonl")
    questions = [q for q in read_jsonl(args.data / "locomo-dev" / "queries.jsonl") if q["gold_ids"]]
    if args.limit_queries:
        questions = questions[: args.limit_queries]
    by_conversation: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for doc in documents:
        by_conversation[doc["conversation_id"]].append(doc)
    asked: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for question in questions:
        asked[question["conversation_id"]].append(question)
    result, per_cat = Result(), defaultdict(list)
    query_timer = Timer()
    for conversation, its_questions in asked.items():
        turns = by_conversation[conversation]
        doc_vectors = result.docs.embed(provider, [f"{t['speaker']}: {t['text']}" for t in turns], args.batch_size)
        query_vectors = query_timer.embed(provider, [q["question"] for q in its_questions], args.batch_size)
        ranked = top_k(query_vectors, doc_vectors, 10)
        for question, row in zip(its_questions, ranked, strict=True):
            gold = set(question["gold_ids"])
            ids = [turns[i]["id"] for i in row]
            recalls = (len(gold & set(ids[:5])) / len(gold), len(gold & set(ids[:10])) / len(gold))
            per_cat[LOCOMO_CATEGORIES.get(question["category"], str(question["category"]))].append(recalls)
    all_recalls = [r for rows in per_cat.values() for r in rows]
    result.queries = len(all_recalls)
    result.metrics = {
        "R@5": float(np.mean([r[0] for r in all_recalls])),
        "R@10": float(np.mean([r[1] for r in all_recalls])),
    }
    result.per_category = {
        name: (len(rows), float(np.mean([r[0] for r in rows])), float(np.mean([r[1] for r in rows])))
        for name, rows in sorted(per_cat.items())
    }
    return result


def scifact(provider: EmbeddingProvider, args: argparse.Namespace) -> Result:
    documents = read_jsonl(args.data / "scifact-dev" / "documents.jsonl")
    claims = [q for q in read_jsonl(args.data / "scifact-dev" / "queries.jsonl") if q["gold_ids"]]
    if args.limit_queries:
        claims = claims[: args.limit_queries]
    if args.limit_docs:  # keep every gold abstract of the asked claims, then fill up to the limit
        gold = {g for c in claims for g in c["gold_ids"]}
        kept = [d for d in documents if d["id"] in gold]
        kept += [d for d in documents if d["id"] not in gold][: max(args.limit_docs - len(kept), 0)]
        documents = kept
    result = Result()
    doc_vectors = result.docs.embed(provider, [f"{d['title']} {d['text']}" for d in documents], args.batch_size)
    query_vectors = Timer().embed(provider, [c["question"] for c in claims], args.batch_size)
    ranked = top_k(query_vectors, doc_vectors, 10)
    ndcgs, recalls = [], []
    for claim, row in zip(claims, ranked, strict=True):
        gold = set(claim["gold_ids"])
        hits = [documents[i]["id"] in gold for i in row]
        dcg = sum(1.0 / math.log2(rank + 2) for rank, hit in enumerate(hits) if hit)
        ideal = sum(1.0 / math.log2(rank + 2) for rank in range(min(len(gold), 10)))
        ndcgs.append(dcg / ideal)
        recalls.append(sum(hits) / len(gold))
    result.queries = len(claims)
    result.metrics = {"nDCG@10": float(np.mean(ndcgs)), "R@10": float(np.mean(recalls))}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.embedding_quality",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--providers", default="synthetic,local,static", help="comma-separated (default %(default)s)")
    parser.add_argument("--datasets", default="locomo,scifact", help="comma-separated (default %(default)s)")
    parser.add_argument("--limit-queries", type=int, default=0, help="first N questions of each set (0: all)")
    parser.add_argument(
        "--limit-docs", type=int, default=0, help="SciFact only: the asked claims' gold abstracts plus others up to N"
    )
    data_dir = Path(os.environ.get("MNEMOFLOW_DATA_DIR") or ROOT / ".mnemoflow")
    parser.add_argument(
        "--static-path", type=Path, default=data_dir / "models" / "minilm-static-256", help="model for `static`"
    )
    parser.add_argument("--local-threads", type=int, default=1, help="onnxruntime threads for `local` (default 1)")
    parser.add_argument("--batch-size", type=int, default=256, help="texts per embed() call (default 256)")
    parser.add_argument("--data", type=Path, default=DATA, help="evaluation data root (default ../shared/data)")
    args = parser.parse_args()
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    runners: dict[str, Callable[[EmbeddingProvider, argparse.Namespace], Result]] = {
        "locomo": locomo,
        "scifact": scifact,
    }
    rows = []
    for spec in [p.strip() for p in args.providers.split(",") if p.strip()]:
        label, provider = make_provider(spec, args)
        print(f"{label}: {provider.name} {provider.model} ({provider.dim} dims)", flush=True)
        row: dict[str, Any] = {"label": label, "dim": provider.dim}
        for name in datasets:
            began = time.perf_counter()
            result = runners[name](provider, args)
            row[name] = result
            print(
                f"  {name}: {result.queries} queries, {result.docs.texts} docs "
                f"({result.docs.chars / max(result.docs.texts, 1):.0f} chars avg) embedded at "
                f"{result.docs.rate:,.0f} docs/s; "
                + ", ".join(f"{k} {v:.3f}" for k, v in result.metrics.items())
                + f" [{time.perf_counter() - began:.0f} s]",
                flush=True,
            )
        rows.append(row)

    print()
    header = f"{'provider':<14} {'dim':>4}"
    if "locomo" in datasets:
        header += f" | {'LoCoMo R@5':>10} {'R@10':>6} {'turns/s':>8}"
    if "scifact" in datasets:
        header += f" | {'SciFact nDCG@10':>15} {'R@10':>6} {'abstracts/s':>11}"
    print(header)
    print("-" * len(header))
    for row in rows:
        line = f"{row['label']:<14} {row['dim']:>4}"
        if "locomo" in datasets:
            r = row["locomo"]
            line += f" | {r.metrics['R@5']:>10.3f} {r.metrics['R@10']:>6.3f} {r.docs.rate:>8,.0f}"
        if "scifact" in datasets:
            r = row["scifact"]
            line += f" | {r.metrics['nDCG@10']:>15.3f} {r.metrics['R@10']:>6.3f} {r.docs.rate:>11,.0f}"
        print(line)
    if "locomo" in datasets:
        print("\nLoCoMo per category, R@5 / R@10 (questions):")
        categories = sorted({c for row in rows for c in row["locomo"].per_category})
        print(f"{'provider':<14} " + " ".join(f"{c:>22}" for c in categories))
        for row in rows:
            cells = []
            for c in categories:
                n, r5, r10 = row["locomo"].per_category.get(c, (0, math.nan, math.nan))
                cells.append(f"{r5:.3f} / {r10:.3f} ({n:>3})".rjust(22))
            print(f"{row['label']:<14} " + " ".join(cells))


if __name__ == "__main__":
    main()
