"""The decay seed's compression mechanics: the dimension ladder, mean-pooling, summaries."""

from __future__ import annotations

import numpy as np
import pytest

from shared.lifecycle import compression


def test_dimension_ladder_halves_down_to_the_minimum() -> None:
    assert compression.dimension_ladder(384, min_dim=64, max_dim=1536) == [384, 192, 96]
    assert compression.dimension_ladder(1536, min_dim=64, max_dim=1536) == [1536, 768, 384, 192, 96]
    assert compression.dimension_ladder(256, min_dim=64, max_dim=1536) == [256, 128, 64]
    assert compression.dimension_ladder(1536, min_dim=128, max_dim=512) == [1536, 384, 192]
    ladder = [384, 192, 96]
    assert compression.compression_target(384, 384, 0.69, ladder) == 192  # floor(264.96) -> 192
    assert compression.compression_target(384, 384, 0.3, ladder) == 96
    assert compression.compression_target(96, 384, 0.6, ladder) == 96  # never back up the ladder


def test_pooling_rung_by_rung_equals_pooling_at_once() -> None:
    rng = np.random.default_rng(7)
    for dim in (384, 100):
        vector = rng.standard_normal(dim).astype(np.float32)
        step = vector
        for rung in compression.dimension_ladder(dim, min_dim=20, max_dim=4000)[1:]:
            step = compression.pool_to(step, rung)
            np.testing.assert_allclose(step, compression.pool_to(vector, rung), rtol=1e-5, atol=1e-6)
        assert np.linalg.norm(step) == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(ValueError, match="ladder"):
        compression.pool_to(rng.standard_normal(384), 100)


def test_pooled_vectors_keep_similarity_order() -> None:
    """Why compressed memories stay findable: the pooled query ranks pooled memories about as before."""
    rng = np.random.default_rng(3)
    query = rng.standard_normal(384)
    near = query + 0.6 * rng.standard_normal(384)
    far = query + 2.5 * rng.standard_normal(384)

    def cos(a: np.ndarray, b: np.ndarray) -> float:
        return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))

    for rung in (192, 96):
        q, n, f = (compression.pool_to(v, rung) for v in (query, near, far))
        assert cos(q, n) > cos(q, f)


def test_summary_layers() -> None:
    text = (
        "The deployment failed at midnight. Nobody noticed the alert. The database migration locked the users "
        "table for an hour. We rolled back the deployment and the database recovered. Lunch was pizza. The "
        "postmortem blamed the migration."
    )
    assert len(text) > 200
    assert compression.compress_summary(text, 0.9) == text[:200] + "..."
    extractive = compression.compress_summary(text, 0.6)
    assert len(extractive) <= 80 and extractive.startswith("The deployment failed")
    keywords = compression.compress_summary(text, 0.3).split()
    assert keywords[:2] == ["deployment", "database"] and len(keywords) == 5
    # OM_SUMMARY_LAYERS=1 is keywords only, 2 drops the truncation layer
    assert compression.compress_summary(text, 0.9, layers=1) == compression.compress_summary(text, 0.3)
    assert compression.compress_summary(text, 0.9, layers=2) == extractive
    assert compression.compress_summary("short note", 0.9) == "short note"
