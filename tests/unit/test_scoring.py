"""Reciprocal rank fusion, recency, the composite score and cosine similarity."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shared.scoring import (
    ScoreComponents,
    ScoreWeights,
    composite_score,
    cosine_similarity,
    recency_score,
    rrf_fuse,
)


def test_rrf_sums_reciprocal_ranks_across_lists():
    fused = rrf_fuse([["a", "b", "c"], ["c", "d"]])
    assert fused == pytest.approx({"a": 1 / 61, "b": 1 / 62, "c": 1 / 63 + 1 / 61, "d": 1 / 62})
    assert max(fused, key=fused.__getitem__) == "c"


def test_rrf_with_custom_k():
    assert rrf_fuse([[7, 8], [8]], k=0) == pytest.approx({7: 1.0, 8: 1 / 2 + 1 / 1})


def test_rrf_tolerates_missing_rankers():
    assert rrf_fuse([]) == {}
    assert rrf_fuse([[], []]) == {}
    assert rrf_fuse([[], ["x"]]) == pytest.approx({"x": 1 / 61})


def test_rrf_counts_an_id_once_per_list_at_its_best_rank():
    assert rrf_fuse([["a", "b", "a"]]) == pytest.approx({"a": 1 / 61, "b": 1 / 62})


def test_rrf_refuses_negative_k():
    with pytest.raises(ValueError, match="non-negative"):
        rrf_fuse([["a"]], k=-1)


def test_recency_score():
    assert recency_score(0) == 1.0
    assert recency_score(10) == pytest.approx(math.exp(-0.5))
    assert recency_score(30) == pytest.approx(0.2231, abs=1e-4)
    assert recency_score(-5) == 1.0
    assert recency_score(2, decay_per_day=0.5) == pytest.approx(math.exp(-1))


def test_composite_score_is_openmemorys_weighted_sum():
    weights = ScoreWeights()
    assert (weights.similarity, weights.salience, weights.recency, weights.waypoint) == (0.6, 0.2, 0.1, 0.1)
    components = ScoreComponents(similarity=1.0, salience=0.5, recency=0.2, waypoint=0.0)
    assert composite_score(components, weights) == pytest.approx(0.6 + 0.1 + 0.02)
    only_waypoint = ScoreWeights(similarity=0, salience=0, recency=0, waypoint=1)
    assert composite_score(ScoreComponents(0.9, 0.9, 0.9, 0.3), only_waypoint) == pytest.approx(0.3)


def test_cosine_similarity():
    assert cosine_similarity([1, 0], [0, 1]) == 0.0
    assert cosine_similarity([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert cosine_similarity([1, 0], [-3, 0]) == pytest.approx(-1.0)
    assert cosine_similarity([1, 0], [1, 1]) == pytest.approx(1 / math.sqrt(2))
    assert cosine_similarity(np.array([3.0, 4.0], dtype=np.float32), [4.0, 3.0]) == pytest.approx(24 / 25)


def test_cosine_similarity_of_a_zero_vector_is_zero():
    assert cosine_similarity([0, 0], [1, 1]) == 0.0
    assert cosine_similarity(np.zeros(3), np.zeros(3)) == 0.0


def test_recency_weight_interpolates_recalls_weights() -> None:
    from shared.scoring import recency_interpolated

    relevance_first, fresh_first = recency_interpolated(0.0), recency_interpolated(1.0)
    assert (relevance_first.similarity, relevance_first.recency, relevance_first.salience) == (0.70, 0.0, 0.20)
    assert (fresh_first.similarity, fresh_first.recency, fresh_first.salience) == pytest.approx((0.40, 0.40, 0.10))
    for r in (0.0, 0.3, 0.7, 1.0):
        w = recency_interpolated(r)
        assert w.similarity + w.salience + w.recency + w.waypoint == pytest.approx(1.0)
    assert recency_interpolated(3.0) == fresh_first  # clamped
