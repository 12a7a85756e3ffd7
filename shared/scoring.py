"""Retrieval scoring math: reciprocal rank fusion, recency, the composite score, cosine."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

T = TypeVar("T", bound=Hashable)


def rrf_fuse(rankings: Sequence[Sequence[T]], k: int = 60) -> dict[T, float]:
    """Reciprocal Rank Fusion (Cormack et al. 2009): each id scores the sum of 1/(k + rank) over the lists."""
    if k < 0:
        raise ValueError(f"k must be non-negative, got {k}")
    scores: dict[T, float] = {}
    for ranking in rankings:
        seen: set[T] = set()
        for rank, item in enumerate(ranking, start=1):
            # A ranker listing an id twice (several chunks of one memory) counts only its best rank.
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return scores


def recency_score(days_since_seen: float, decay_per_day: float = 0.05) -> float:
    """OpenMem's exp(-decay × days): about 0.95 after a day, 0.22 after a month; 1.0 for the future."""
    return math.exp(-decay_per_day * max(days_since_seen, 0.0))


@dataclass(frozen=True)
class ScoreWeights:
    """OpenMemory's composite weights."""

    similarity: float = 0.6
    salience: float = 0.2
    recency: float = 0.1
    waypoint: float = 0.1


def recency_interpolated(recency_weight: float) -> ScoreWeights:
    """Recall's weight interpolation, mapped onto OpenMemory's four components: relevance 0.70 - 0.30 r,
    recency 0.40 r, importance (salience, which decay already discounts) 0.20 - 0.10 r, strength (here the
    waypoint component) 0.10. r = 0 ranks by relevance, r = 1 lets freshness weigh as much; the sum is 1."""
    r = min(max(recency_weight, 0.0), 1.0)
    return ScoreWeights(similarity=0.70 - 0.30 * r, salience=0.20 - 0.10 * r, recency=0.40 * r, waypoint=0.10)


@dataclass(frozen=True)
class ScoreComponents:
    similarity: float
    salience: float
    recency: float
    waypoint: float


def composite_score(c: ScoreComponents, w: ScoreWeights) -> float:
    """The weighted sum of the four components."""
    return w.similarity * c.similarity + w.salience * c.salience + w.recency * c.recency + w.waypoint * c.waypoint


# OpenMem's status penalty, and the factor a memory contradicted by a stronger one is multiplied by.
STATUS_PENALTY = {"active": 1.0, "superseded": 0.5, "contradicted": 0.3}
CONFLICT_PENALTY = 0.3


def confidence_factor(confidence: float, weight: float) -> float:
    """OpenMem gives confidence a weight of 0.1: a memory of confidence c keeps 1 - weight * (1 - c) of its score."""
    return 1.0 - weight * (1.0 - min(max(confidence, 0.0), 1.0))


def cosine_similarity(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Cosine of two vectors; 0.0 when either is all zeros."""
    va, vb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    norm_a, norm_b = float(np.linalg.norm(va)), float(np.linalg.norm(vb))
    if norm_a == 0.0 or norm_b == 0.0:
        return 0.0
    return float(np.dot(va, vb) / (norm_a * norm_b))
