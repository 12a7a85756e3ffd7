"""The decay seed's formulas and worked examples (openmemory-decay-algorithm.txt), as pure functions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shared.lifecycle import compression, formulas
from shared.lifecycle.formulas import COLD, HOT, WARM, TierRules

RULES = TierRules()


def test_tiers_follow_the_seed_criteria() -> None:
    # Example 1: last seen 2 days ago, 8 coactivations, salience 0.85 -> hot
    assert formulas.classify_tier(2, 0.85, 8, RULES) == HOT
    assert formulas.classify_tier(2, 0.3, 6, RULES) == HOT  # recent and busy
    assert formulas.classify_tier(2, 0.3, 5, RULES) == WARM  # recent, not busy enough
    assert formulas.classify_tier(4, 0.55, 0, RULES) == WARM  # example "warm": 4 days, 0.55
    assert formulas.classify_tier(30, 0.45, 0, RULES) == WARM  # old but salience > 0.4
    assert formulas.classify_tier(45, 0.18, 0, RULES) == COLD  # example "cold": 45 days, 0.18
    assert formulas.classify_tier(6, 0.9, 9, RULES) == WARM  # 6 days is no longer recent; 0.9 > 0.4


def test_hot_memory_barely_decays() -> None:
    # Example 1: lambda 0.005 keeps f about 0.99 over a couple of days
    assert formulas.decay_factor(RULES.hot_lambda, 2, 0.85) == pytest.approx(0.99, abs=0.005)


def test_warm_memory_decay_at_days_5_12_20() -> None:
    """Example 2 (the seed rounds each intermediate value, so its figures are matched to its rounding)."""
    f5 = formulas.decay_factor(RULES.warm_lambda, 5, 0.6)
    assert f5 == pytest.approx(0.87, abs=0.005)
    assert formulas.decayed_salience(0.6, f5) == pytest.approx(0.522, abs=0.003)
    assert f5 > 0.7  # no compression yet
    f12 = formulas.decay_factor(RULES.warm_lambda, 12, 0.522)
    assert f12 == pytest.approx(0.68, abs=0.005)  # the seed writes "≈ 0.70 (just at threshold)"
    assert formulas.decayed_salience(0.522, f12) == pytest.approx(0.355, abs=0.003)  # seed: 0.365 from 0.70
    f20 = formulas.decay_factor(RULES.warm_lambda, 20, 0.365)
    assert f20 == pytest.approx(0.423, abs=0.005)  # seed: ≈ 0.46
    assert formulas.decayed_salience(0.365, f20) == pytest.approx(0.154, abs=0.003)
    assert formulas.classify_tier(20, 0.168, 0, RULES) == COLD  # "Status: COLD (salience < 0.4, old)"
    # "Compression begins": f < 0.7; the seed's floor(1536 x 0.46) = 706 lands on the 384 rung of the ladder
    ladder = compression.dimension_ladder(1536, min_dim=64, max_dim=1536)
    assert compression.compression_target(1536, 1536, 0.46, ladder) == 384
    assert compression.compress_summary("Python supports list comprehensions for concise iteration.", 0.46) != ""


def test_cold_memory_is_fingerprinted_at_day_45() -> None:
    """Example 3: exp(-0.05 x 45 / 0.6) = exp(-3.75) = 0.0235 (the seed prints 0.0055); either way f < 0.25."""
    f = formulas.decay_factor(RULES.cold_lambda, 45, 0.5)
    assert f == pytest.approx(math.exp(-3.75))
    assert f < 0.25
    assert formulas.decayed_salience(0.5, f) == pytest.approx(0.0117, abs=0.0005)
    summary = compression.fingerprint_summary("User debugging timeout issue in production")
    assert summary == "user debugging timeout"  # the seed's "user debug timeout", unstemmed
    vector = compression.fingerprint_vector("mem_123", summary, 32)
    assert vector.shape == (32,)
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)
    assert np.array_equal(vector, compression.fingerprint_vector("mem_123", summary, 32))  # deterministic
    assert not np.allclose(vector, compression.fingerprint_vector("mem_124", summary, 32))


def test_reinforcement_brings_a_cold_memory_back() -> None:
    # "Before: salience = 0.35 (cold) / After: salience = 0.85 (hot again!)"
    assert formulas.reinforced_salience(0.35, 0.5) == pytest.approx(0.85)
    assert formulas.reinforced_salience(0.8, 0.5) == 1.0


def test_salience_grows_logarithmically_with_coactivations() -> None:
    assert formulas.effective_salience(0.4, 0) == pytest.approx(0.4)
    assert formulas.effective_salience(0.4, 1) == pytest.approx(0.4 * (1 + math.log(2)))
    assert formulas.effective_salience(0.4, 100) == 1.0  # clamped


def test_sector_scaling_keeps_the_tier_rate_for_the_average_sector() -> None:
    from shared.memory.sectors import SECTOR_CONFIGS

    scales = {name: formulas.sector_scale(c.decay_lambda) for name, c in SECTOR_CONFIGS.items()}
    assert sum(scales.values()) / len(scales) == pytest.approx(1.0)
    assert max(scales, key=scales.__getitem__) == "emotional"
    assert min(scales, key=scales.__getitem__) == "reflective"
