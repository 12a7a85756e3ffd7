"""The fresh tier's anchors: spherical k-means finds planted directions, and an anchor left empty keeps its place."""

from __future__ import annotations

import numpy as np

from shared.storage.anchors import spherical_kmeans


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
