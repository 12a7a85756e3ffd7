"""The fresh tier's anchors, offline: a query's first pass through anchors trained on its own set's vectors, and
through anchors trained on another set's (the drift after which the merge cycle trains them again), in numpy.

    python -m bench.anchors                       # the default local model, 32 of 256 anchors read
    python -m bench.anchors --probes 16 --cache /tmp/anchors.npz

Two pools with their questions as queries: LoCoMo's turns ("Speaker: text", its five conversations together) and
SciFact's abstracts ("title text"). For each pool, anchors are trained (shared/storage/anchors.py: spherical k-means,
256, over a sample of at most 16,384 vectors) on the pool itself, as after a (re)training, and on the other pool, as
when the fresh tier has moved on from the vectors they were trained on; every vector is filed under its nearest
anchor. A query then does what `mnemoflow_fresh` and the read path do for a crowded tenant: it reads the codes of its
`--probes` nearest anchors, ranks them by Hamming distance to its own code, and compares the best 400 exactly
(`search.FRESH_SHORTLIST`). Printed per case:

- drift: the total variation between how the pool files under the anchors and how their training sample did (what
  `anchors.drifted` measures; past `anchors.DRIFT` the merge cycle trains a new generation);
- codes read per query: mean and p95, as a share of the pool;
- found: the share of each query's exact ten nearest the first pass finds; the baseline in the same run reads
  every code.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from bench.embedding_quality import DATA, read_jsonl
from shared.embedding.base import normalize_rows
from shared.storage.anchors import ANCHORS, DRIFT, SAMPLE, shares, spherical_kmeans, total_variation
from shared.storage.search import FRESH_SHORTLIST

TOP = 10


class Pool(NamedTuple):
    name: str
    vectors: np.ndarray  # unit rows
    queries: np.ndarray  # unit rows


class Case(NamedTuple):
    drift: float
    read_mean: float
    read_p95: float
    found: float


def texts(data: Path) -> dict[str, tuple[list[str], list[str]]]:
    """Each pool's documents and questions."""
    turns = read_jsonl(data / "locomo-dev" / "documents.jsonl")
    asked = [q["question"] for q in read_jsonl(data / "locomo-dev" / "queries.jsonl") if q["gold_ids"]]
    abstracts = read_jsonl(data / "scifact-dev" / "documents.jsonl")
    claims = [q["question"] for q in read_jsonl(data / "scifact-dev" / "queries.jsonl")]
    return {
        "LoCoMo": ([f"{t['speaker']}: {t['text']}" for t in turns], asked),
        "SciFact": ([f"{d['title']} {d['text']}" for d in abstracts], claims),
    }


def embed_pools(provider_name: str, data: Path, cache: Path | None) -> list[Pool]:
    if cache and cache.exists():
        saved = np.load(cache)
        return [Pool(name, saved[f"{name}_docs"], saved[f"{name}_queries"]) for name in ("LoCoMo", "SciFact")]
    if provider_name == "local":
        from shared.embedding.local import LocalOnnxEmbedder

        provider = LocalOnnxEmbedder()
    else:
        from shared.embedding.synthetic import SyntheticEmbedder

        provider = SyntheticEmbedder(dim=384)
    pools = []
    for name, (docs, questions) in texts(data).items():
        started = time.perf_counter()
        vectors = np.vstack([provider.embed(docs[i : i + 64]) for i in range(0, len(docs), 64)])
        queries = np.vstack([provider.embed(questions[i : i + 64]) for i in range(0, len(questions), 64)])
        print(
            f"  embedded {name}: {len(docs):,} documents, {len(questions):,} questions "
            f"({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
        pools.append(Pool(name, normalize_rows(vectors).astype(np.float32), normalize_rows(queries).astype(np.float32)))
    if cache:
        np.savez(
            cache, **{f"{p.name}_docs": p.vectors for p in pools}, **{f"{p.name}_queries": p.queries for p in pools}
        )
    return pools


def hamming(queries: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """Hamming distances between the binary codes (sign bits) of each query and each vector."""
    q = (queries > 0).astype(np.float32)
    v = (vectors > 0).astype(np.float32)
    return q @ (1.0 - v).T + (1.0 - q) @ v.T


def first_pass(
    pool: Pool, centroids: np.ndarray | None, probes: int, shortlist: int = FRESH_SHORTLIST
) -> tuple[np.ndarray, np.ndarray]:
    """Per query: the share of the pool's codes read, and the share of its exact TOP nearest found."""
    exact = np.argsort(-(pool.queries @ pool.vectors.T), axis=1)[:, :TOP]
    distances = hamming(pool.queries, pool.vectors)
    filed = None if centroids is None else (pool.vectors @ centroids.T).argmax(axis=1)
    nearest_anchors = None if centroids is None else np.argsort(-(pool.queries @ centroids.T), axis=1)[:, :probes]
    read, found = np.empty(len(pool.queries)), np.empty(len(pool.queries))
    for i, query in enumerate(pool.queries):
        if filed is None or nearest_anchors is None:
            candidates = np.arange(len(pool.vectors))
        else:
            candidates = np.flatnonzero(np.isin(filed, nearest_anchors[i]))
        read[i] = len(candidates) / len(pool.vectors)
        ranked = candidates[np.argsort(distances[i, candidates], kind="stable")[:shortlist]]
        best = ranked[np.argsort(-(pool.vectors[ranked] @ query), kind="stable")[:TOP]]
        found[i] = len(set(best.tolist()) & set(exact[i].tolist())) / TOP
    return read, found


def trained_on(vectors: np.ndarray, seed: int, anchors: int = ANCHORS) -> tuple[np.ndarray, np.ndarray]:
    """Anchors trained as the merge cycle trains them (a sample of at most SAMPLE vectors), and their sample's
    shares."""
    rng = np.random.default_rng(seed)
    sample = vectors[rng.permutation(len(vectors))[:SAMPLE]]
    centroids = spherical_kmeans(sample, anchors, seed=seed)
    return centroids, shares(sample, centroids)


def case(pool: Pool, centroids: np.ndarray, sample_shares: np.ndarray, probes: int, shortlist: int) -> Case:
    filed = np.bincount((pool.vectors @ centroids.T).argmax(axis=1), minlength=len(centroids))
    drift = total_variation([float(s) for s in sample_shares], [int(n) for n in filed])
    read, found = first_pass(pool, centroids, probes, shortlist)
    return Case(drift, float(read.mean()), float(np.percentile(read, 95)), float(found.mean()))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n", 1)[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--provider", choices=["local", "synthetic"], default="local", help="embedding model [local]")
    parser.add_argument("--anchors", type=int, default=ANCHORS, help=f"anchors trained [{ANCHORS}]")
    parser.add_argument(
        "--probes", type=int, default=32, help="anchors a query reads the codes of [32: migration 0025]"
    )
    parser.add_argument(
        "--shortlist", type=int, default=FRESH_SHORTLIST, help=f"codes compared exactly [{FRESH_SHORTLIST}]"
    )
    parser.add_argument("--data", type=Path, default=DATA, help=f"the evaluation sets [{DATA}]")
    parser.add_argument("--cache", type=Path, help="an .npz of the embedded pools: written once, read after")
    args = parser.parse_args()

    pools = embed_pools(args.provider, args.data, args.cache)
    trained = {p.name: trained_on(p.vectors, seed=1, anchors=args.anchors) for p in pools}
    print(
        f"\nthe first pass through {args.probes} of {args.anchors} anchors ({args.provider}; top {TOP}, "
        f"{args.shortlist} compared exactly; retrained past a drift of {DRIFT})"
    )
    print(
        f"{'pool':>8}  {'anchors trained on':>18}  {'drift':>5}  {'read mean':>9}  {'read p95':>8}  "
        f"{'found':>5}  {'found, every code read':>22}"
    )
    for pool in pools:
        _, every = first_pass(pool, None, args.probes, args.shortlist)
        for other in pools:
            got = case(pool, *trained[other.name], args.probes, args.shortlist)
            print(
                f"{pool.name:>8}  {other.name + (' (own)' if other is pool else ''):>18}  {got.drift:5.2f}  "
                f"{got.read_mean:9.1%}  {got.read_p95:8.1%}  {got.found:5.3f}  {float(every.mean()):22.3f}"
            )


if __name__ == "__main__":
    main()
