"""The decay seed's formulas and worked examples (openmemory-decay-algorithm.txt), as pure functions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shared import decay
from shared.decay import COLD, HOT, WARM, TierRules

RULES = TierRules()


def test_tiers_follow_the_seed_criteria() -> None:
    # Example 1: last seen 2 days ago, 8 coactivations, salience 0.85 -> hot
    assert decay.classify_tier(2, 0.85, 8, RULES) == HOT
    assert decay.classify_tier(2, 0.3, 6, RULES) == HOT  # recent and busy
    assert decay.classify_tier(2, 0.3, 5, RULES) == WARM  # recent, not busy enough
    assert decay.classify_tier(4, 0.55, 0, RULES) == WARM  # example "warm": 4 days, 0.55
    assert decay.classify_tier(30, 0.45, 0, RULES) == WARM  # old but salience > 0.4
    assert decay.classify_tier(45, 0.18, 0, RULES) == COLD  # example "cold": 45 days, 0.18
    assert decay.classify_tier(6, 0.9, 9, RULES) == WARM  # 6 days is no longer recent; 0.9 > 0.4


def test_hot_memory_barely_decays() -> None:
    # Example 1: lambda 0.005 keeps f about 0.99 over a couple of days
    assert decay.decay_factor(RULES.hot_lambda, 2, 0.85) == pytest.approx(0.99, abs=0.005)


def test_warm_memory_decay_at_days_5_12_20() -> None:
    """Example 2 (the seed rounds each intermediate value, so its figures are matched to its rounding)."""
    f5 = decay.decay_factor(RULES.warm_lambda, 5, 0.6)
    assert f5 == pytest.approx(0.87, abs=0.005)
    assert decay.decayed_salience(0.6, f5) == pytest.approx(0.522, abs=0.003)
    assert f5 > 0.7  # no compression yet
    f12 = decay.decay_factor(RULES.warm_lambda, 12, 0.522)
    assert f12 == pytest.approx(0.68, abs=0.005)  # the seed writes "≈ 0.70 (just at threshold)"
    assert decay.decayed_salience(0.522, f12) == pytest.approx(0.355, abs=0.003)  # seed: 0.365 from 0.70
    f20 = decay.decay_factor(RULES.warm_lambda, 20, 0.365)
    assert f20 == pytest.approx(0.423, abs=0.005)  # seed: ≈ 0.46
    assert decay.decayed_salience(0.365, f20) == pytest.approx(0.154, abs=0.003)
    assert decay.classify_tier(20, 0.168, 0, RULES) == COLD  # "Status: COLD (salience < 0.4, old)"
    # "Compression begins": f < 0.7; the seed's floor(1536 x 0.46) = 706 lands on the 384 rung of the ladder
    ladder = decay.dimension_ladder(1536, min_dim=64, max_dim=1536)
    assert decay.compression_target(1536, 1536, 0.46, ladder) == 384
    assert decay.compress_summary("Python supports list comprehensions for concise iteration.", 0.46) != ""


def test_cold_memory_is_fingerprinted_at_day_45() -> None:
    """Example 3: exp(-0.05 x 45 / 0.6) = exp(-3.75) = 0.0235 (the seed prints 0.0055); either way f < 0.25."""
    f = decay.decay_factor(RULES.cold_lambda, 45, 0.5)
    assert f == pytest.approx(math.exp(-3.75))
    assert f < 0.25
    assert decay.decayed_salience(0.5, f) == pytest.approx(0.0117, abs=0.0005)
    summary = decay.fingerprint_summary("User debugging timeout issue in production")
    assert summary == "user debugging timeout"  # the seed's "user debug timeout", unstemmed
    vector = decay.fingerprint_vector("mem_123", summary, 32)
    assert vector.shape == (32,)
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)
    assert np.array_equal(vector, decay.fingerprint_vector("mem_123", summary, 32))  # deterministic
    assert not np.allclose(vector, decay.fingerprint_vector("mem_124", summary, 32))


def test_reinforcement_brings_a_cold_memory_back() -> None:
    # "Before: salience = 0.35 (cold) / After: salience = 0.85 (hot again!)"
    assert decay.reinforced_salience(0.35, 0.5) == pytest.approx(0.85)
    assert decay.reinforced_salience(0.8, 0.5) == 1.0


def test_salience_grows_logarithmically_with_coactivations() -> None:
    assert decay.effective_salience(0.4, 0) == pytest.approx(0.4)
    assert decay.effective_salience(0.4, 1) == pytest.approx(0.4 * (1 + math.log(2)))
    assert decay.effective_salience(0.4, 100) == 1.0  # clamped


def test_sector_scaling_keeps_the_tier_rate_for_the_average_sector() -> None:
    from shared.sectors import SECTOR_CONFIGS

    scales = {name: decay.sector_scale(c.decay_lambda) for name, c in SECTOR_CONFIGS.items()}
    assert sum(scales.values()) / len(scales) == pytest.approx(1.0)
    assert max(scales, key=scales.__getitem__) == "emotional"
    assert min(scales, key=scales.__getitem__) == "reflective"


def test_dimension_ladder_halves_down_to_the_minimum() -> None:
    assert decay.dimension_ladder(384, min_dim=64, max_dim=1536) == [384, 192, 96]
    assert decay.dimension_ladder(1536, min_dim=64, max_dim=1536) == [1536, 768, 384, 192, 96]
    assert decay.dimension_ladder(256, min_dim=64, max_dim=1536) == [256, 128, 64]
    assert decay.dimension_ladder(1536, min_dim=128, max_dim=512) == [1536, 384, 192]
    ladder = [384, 192, 96]
    assert decay.compression_target(384, 384, 0.69, ladder) == 192  # floor(264.96) -> 192
    assert decay.compression_target(384, 384, 0.3, ladder) == 96
    assert decay.compression_target(96, 384, 0.6, ladder) == 96  # never back up the ladder


def test_pooling_rung_by_rung_equals_pooling_at_once() -> None:
    rng = np.random.default_rng(7)
    for dim in (384, 100):
        vector = rng.standard_normal(dim).astype(np.float32)
        step = vector
        for rung in decay.dimension_ladder(dim, min_dim=20, max_dim=4000)[1:]:
            step = decay.pool_to(step, rung)
            np.testing.assert_allclose(step, decay.pool_to(vector, rung), rtol=1e-5, atol=1e-6)
        assert np.linalg.norm(step) == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(ValueError, match="ladder"):
        decay.pool_to(rng.standard_normal(384), 100)


def test_pooled_vectors_keep_similarity_order() -> None:
    """Why compressed memories stay findable: the pooled query ranks pooled memories about as before."""
    rng = np.random.default_rng(3)
    query = rng.standard_normal(384)
    near = query + 0.6 * rng.standard_normal(384)
    far = query + 2.5 * rng.standard_normal(384)

    def cos(a: np.ndarray, b: np.ndarray) -> float:
        return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))

    for rung in (192, 96):
        q, n, f = (decay.pool_to(v, rung) for v in (query, near, far))
        assert cos(q, n) > cos(q, f)


def test_summary_layers() -> None:
    text = (
        "The deployment failed at midnight. Nobody noticed the alert. The database migration locked the users "
        "table for an hour. We rolled back the deployment and the database recovered. Lunch was pizza. The "
        "postmortem blamed the migration."
    )
    assert len(text) > 200
    assert decay.compress_summary(text, 0.9) == text[:200] + "..."
    extractive = decay.compress_summary(text, 0.6)
    assert len(extractive) <= 80 and extractive.startswith("The deployment failed")
    keywords = decay.compress_summary(text, 0.3).split()
    assert keywords[:2] == ["deployment", "database"] and len(keywords) == 5
    # OM_SUMMARY_LAYERS=1 is keywords only, 2 drops the truncation layer
    assert decay.compress_summary(text, 0.9, layers=1) == decay.compress_summary(text, 0.3)
    assert decay.compress_summary(text, 0.9, layers=2) == extractive
    assert decay.compress_summary("short note", 0.9) == "short note"
