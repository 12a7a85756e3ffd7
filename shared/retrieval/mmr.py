"""Maximal Marginal Relevance (the recall seed): re-order what passed the gate for diversity."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence

import numpy as np

from shared.lifecycle.compression import pool_to


def mmr_order(
    ranked: Sequence[uuid.UUID],
    relevance: dict[uuid.UUID, float],
    vectors: dict[uuid.UUID, np.ndarray],
    *,
    lambda_: float,
) -> list[tuple[uuid.UUID, float]]:
    """Maximal Marginal Relevance (Carbonell & Goldstein 1998; the Recall seed): re-order `ranked` so each
    next memory maximises lambda * relevance - (1 - lambda) * its highest cosine to those already chosen.

    Returns (id, redundancy) in the new order. Memories without a vector (or of another dimension) count
    as unrelated to the others. Ties keep the incoming order.
    """
    remaining = list(ranked)
    redundancy = dict.fromkeys(remaining, 0.0)  # highest cosine to anything chosen so far
    chosen: list[tuple[uuid.UUID, float]] = []
    while remaining:
        best = max(
            range(len(remaining)),
            key=lambda i: (lambda_ * relevance[remaining[i]] - (1 - lambda_) * redundancy[remaining[i]], -i),
        )
        picked = remaining.pop(best)
        chosen.append((picked, redundancy[picked]))
        vector = vectors.get(picked)
        if vector is None:
            continue
        for other in remaining:
            other_vector = vectors.get(other)
            if other_vector is not None and other_vector.shape == vector.shape:
                redundancy[other] = max(redundancy[other], float(other_vector @ vector))
    return chosen


def comparable(
    vectors: dict[uuid.UUID, np.ndarray], ladder: Callable[[int], Sequence[int]]
) -> dict[uuid.UUID, np.ndarray]:
    """Vectors of mixed rungs (some memories compressed) pooled to the smallest rung among them, so they can be
    compared; fingerprints (not embeddings) are left out."""
    if len({v.shape[0] for v in vectors.values()}) <= 1:
        return vectors
    full = max(v.shape[0] for v in vectors.values())
    rungs = set(ladder(full))
    usable = {i: v for i, v in vectors.items() if v.shape[0] in rungs}
    smallest = min((v.shape[0] for v in usable.values()), default=full)
    return {i: v if v.shape[0] == smallest else pool_to(v, smallest) for i, v in usable.items()}
