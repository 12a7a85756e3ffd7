"""The fresh tier's anchors: spherical k-means finds planted directions, and an anchor left empty keeps its place; the
share of a sample each anchor takes, and how far the fresh codes' spread over the anchors has drifted from it."""

from __future__ import annotations

import numpy as np
import pytest

from shared.storage.anchors import ANCHORS, NUMBERS, Filing, next_generation, shares, spherical_kmeans, total_variation


def planted(centres: np.ndarray, per: int, noise: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = np.repeat(centres, per, axis=0) + noise * rng.standard_normal((len(centres) * per, centres.shape[1]))
    return rows.astype(np.float32)


def test_each_planted_direction_gets_a_centroid_and_centroids_are_unit():
    rng = np.random.default_rng(1)
    centres = rng.standard_normal((8, 64))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    sample = planted(centres * 3.0, per=200, noise=0.05, seed=2)  # scale does not matter: cosine
    centroids = spherical_kmeans(sample, 8, seed=3)
    assert np.allclose(np.linalg.norm(centroids, axis=1), 1.0, atol=1e-5)
    # every planted direction has a centroid within a small angle of it
    assert (centres @ centroids.T).max(axis=1).min() > 0.99
    # and every row's nearest centroid is its own direction's
    nearest = (sample @ centroids.T).argmax(axis=1)
    own = (centres @ centroids.T).argmax(axis=1)
    assert (nearest == np.repeat(own, 200)).all()


def test_a_centroid_without_rows_keeps_its_place():
    # three distinct rows repeated: with k = 4, a round leaves at least one centroid without rows
    sample = planted(np.eye(3, 16), per=20, noise=0.0, seed=4)
    centroids = spherical_kmeans(sample, 4, seed=5)
    assert np.isfinite(centroids).all()
    assert np.allclose(np.linalg.norm(centroids, axis=1), 1.0, atol=1e-5)


def test_shares_count_each_row_under_its_nearest_centroid_by_cosine():
    centroids = np.eye(3, 4, dtype=np.float32)
    # scaled rows: the direction decides; three nearest the first axis, one the third, none the second
    sample = np.array([[5, 1, 0, 0], [0.2, 0, 0.1, 0], [9, 0, 8, 0], [0, 1, 3, 0]], dtype=np.float32)
    assert shares(sample, centroids).tolist() == [0.75, 0.0, 0.25]


def test_total_variation_of_the_same_spread_is_zero_and_of_disjoint_spreads_one():
    trained = [0.5, 0.25, 0.25, 0.0]
    assert total_variation(trained, [200, 100, 100, 0]) == pytest.approx(0.0)
    assert total_variation(trained, [0, 0, 0, 70]) == pytest.approx(1.0)
    # a quarter of the codes in the last list instead of the first
    assert total_variation(trained, [100, 100, 100, 100]) == pytest.approx(0.25)


def test_anchors_without_a_recorded_share_are_taken_as_even_and_no_codes_is_no_drift():
    assert total_variation([None] * 4, [10, 10, 10, 10]) == pytest.approx(0.0)
    assert total_variation([None] * 4, [40, 0, 0, 0]) == pytest.approx(0.75)
    assert total_variation([0.5, 0.5], [0, 0]) == 0.0


def test_a_writer_files_each_vector_under_the_anchor_of_largest_cosine_by_its_number():
    """`Filing.nearest` answers with the anchors' numbers (a generation's, not positions), picks by cosine whatever
    a vector's length, and matches one comparison at a time (the triggers' `ORDER BY centroid <=> v LIMIT 1`)."""
    rng = np.random.default_rng(7)
    centroids = rng.standard_normal((16, 32)).astype(np.float32)
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    filing = Filing(np.arange(128, 144), centroids)
    vectors = (rng.standard_normal((200, 32)) * rng.uniform(0.1, 10.0, (200, 1))).astype(np.float32)
    one_by_one = [128 + int(np.argmin([1 - (v @ c) / np.linalg.norm(v) for c in centroids])) for v in vectors]
    assert filing.nearest(vectors).tolist() == one_by_one
    assert filing.nearest(centroids[[3, 9]] * 5.0).tolist() == [131, 137]


def test_each_generation_is_numbered_after_the_last_within_smallint():
    """The first generation starts at 0; each next one at the next multiple of ANCHORS, also after a generation of
    an earlier size (128 anchors, whose first number need not be a multiple of 256); the last wraps to 0; no
    generation's numbers pass smallint's 32,767."""
    assert next_generation(None) == 0
    assert next_generation(0) == ANCHORS
    assert next_generation(128) == ANCHORS == 256  # after the old size's second generation (128 to 255)
    assert next_generation(NUMBERS - ANCHORS) == 0
    seen, first = [], 0
    for _ in range(NUMBERS // ANCHORS):
        seen.append(first)
        assert first % ANCHORS == 0 and first + ANCHORS - 1 <= 32_767
        first = next_generation(first)
    assert first == 0 and len(set(seen)) == NUMBERS // ANCHORS
    for old in range(0, 32_768 - 128 + 1, 128):  # every first number a generation of 128 may have had
        after = next_generation(old)
        assert after + ANCHORS - 1 <= 32_767 and (after > old or after == 0)
