"""The memory lifecycle's arithmetic: tiers, the decay factor, salience and its reinforcement, waypoint rules.

Pure functions, each naming the seed rule it follows. The decay cycle (`shared.lifecycle.decay_cycle`) runs the
tier and decay formulas in SQL for whole batches (`shared.storage.decay_steps` mirrors them, and a test checks
the two agree). Sources: `openmemory-decay-algorithm.txt` (the decay seed) and `openmemory-architecture.txt`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shared.memory.sectors import SECTOR_CONFIGS

HOT, WARM, COLD = "hot", "warm", "cold"

# Architecture seed §2.3: sector-specific rates, episodic fast, reflective slow. The tier's λ is scaled by the
# memory's sector rate relative to the mean of the five, so the seed's tier λ holds for the average sector.
# PostgreSQL raises on float underflow where Python quietly gives 0: the factor is floored at e^-60 and a
# salience below 1e-9 is stored as 0 (both far below any threshold that matters), here and in the SQL alike.
MIN_EXPONENT = -60.0
SALIENCE_FLOOR = 1e-9
MEAN_SECTOR_LAMBDA = sum(c.decay_lambda for c in SECTOR_CONFIGS.values()) / len(SECTOR_CONFIGS)


@dataclass(frozen=True)
class TierRules:
    """Decay seed, "Three-Tier System". Defaults are the seed's; every value is a setting."""

    recent_days: float = 6.0
    hot_coactivations: int = 5
    hot_salience: float = 0.7
    warm_salience: float = 0.4
    hot_lambda: float = 0.005
    warm_lambda: float = 0.02
    cold_lambda: float = 0.05

    def lambda_of(self, tier: str) -> float:
        return {HOT: self.hot_lambda, WARM: self.warm_lambda, COLD: self.cold_lambda}[tier]


def clamp01(value: float) -> float:
    return min(1.0, max(0.0, value))


def effective_salience(salience: float, coactivations: int) -> float:
    """Decay seed, "Salience Calculation": clamp(base × (1 + ln(1 + coactivations))).

    The stored salience is the base; this boosted value is what tiering and the decay factor see.
    """
    return clamp01(salience * (1.0 + math.log1p(max(0, coactivations))))


def classify_tier(days_since_seen: float, salience: float, coactivations: int, rules: TierRules) -> str:
    """Decay seed: hot = seen < 6 days AND (coactivations > 5 OR salience > 0.7); warm = seen < 6 days OR
    salience > 0.4; cold otherwise."""
    recent = days_since_seen < rules.recent_days
    if recent and (coactivations > rules.hot_coactivations or salience > rules.hot_salience):
        return HOT
    if recent or salience > rules.warm_salience:
        return WARM
    return COLD


def sector_scale(decay_lambda: float) -> float:
    """Architecture seed §2.3: a memory's sector rate relative to the mean sector rate (1.0 = the tier's λ)."""
    return decay_lambda / MEAN_SECTOR_LAMBDA


def decay_factor(lambda_: float, days: float, salience: float) -> float:
    """Decay seed, "Decay Formula": f = exp(-λ × dt / (salience + 0.1))."""
    return math.exp(max(MIN_EXPONENT, -lambda_ * max(0.0, days) / (salience + 0.1)))


def decayed_salience(salience: float, factor: float) -> float:
    """Decay seed, "New Salience After Decay": clamp(salience × f)."""
    value = salience * factor
    return 0.0 if value < SALIENCE_FLOOR else clamp01(value)


def reinforced_salience(salience: float, boost: float) -> float:
    """Decay seed, "Automatic Reinforcement on Query": min(1.0, salience + boost) (0.5 on a query hit)."""
    return min(1.0, salience + boost)


@dataclass(frozen=True)
class Aging:
    """The decay formula read at query time: the factor the next decay cycle would apply to a memory now.

    The cycle reaches 3 % of each sector a day (OM_DECAY_RATIO), so between two memories of the same age and use
    the stored salience differs only by whether the cycle has reached them yet. Ranking reads salience times this
    factor: both then rank as decayed as the formula says they are (`retrieval.scoring`)."""

    tiers: TierRules = TierRules()
    sector_scaling: bool = True  # MNEMOFLOW_DECAY_SECTOR_SCALING: the tier's λ scaled by the sector's rate

    def factor(self, salience: float, coactivations: int, decay_lambda: float | None, days: float) -> float:
        """Decay seed: the tier of (days since seen, salience boosted by coactivations), its λ (scaled by the
        sector's rate), f = exp(-λ × days / (boosted salience + 0.1)); as storage.decay_steps computes it."""
        boosted = effective_salience(salience, coactivations)
        lambda_ = self.tiers.lambda_of(classify_tier(days, boosted, coactivations, self.tiers))
        if self.sector_scaling and decay_lambda is not None:
            lambda_ *= sector_scale(decay_lambda)
        return decay_factor(lambda_, days, boosted)


def returned(salience: float, recall_lift: float, boost: float) -> tuple[float, float]:
    """A query returned the memory: the seed's reinforcement, and what it added is recall lift too.
    Returns (salience, recall lift); storage.memories.reinforce runs the same in SQL."""
    raised = reinforced_salience(salience, boost)
    return raised, min(1.0, recall_lift + raised - salience)


def confirmed(salience: float, recall_lift: float, boost: float) -> tuple[float, float]:
    """A client said it used the memory (POST /memory/reinforce): the boost, which first confirms recall lift
    (it then counts in ranking in full). Returns (salience, recall lift)."""
    return reinforced_salience(salience, boost), max(0.0, recall_lift - boost)


@dataclass(frozen=True)
class ReinforcementRules:
    """Salience at birth (OpenMemory: 0.4 + 0.1 per additional sector) and what use adds to it (decay seed)."""

    initial_base: float = 0.4
    initial_per_extra_sector: float = 0.1
    query_boost: float = 0.5  # decay seed, "Automatic Reinforcement on Query": a query hit adds 0.5
    manual_boost: float = 0.2  # POST /memory/reinforce without a boost of its own
    on_query: bool = True  # OM_DECAY_REINFORCE_ON_QUERY
    regenerate: bool = True  # OM_REGENERATION_ENABLED: a compressed or fingerprinted hit is embedded again

    def initial_salience(self, sectors: int) -> float:
        """A new memory's salience when the writer gives none: more sectors, more salient (capped at 1)."""
        return min(1.0, self.initial_base + self.initial_per_extra_sector * (sectors - 1))


@dataclass(frozen=True)
class WaypointRules:
    """Architecture seed, waypoints: each new memory's single strongest link, reinforcement and pruning."""

    link_threshold: float = 0.75  # a new memory is linked to its best match when their cosine is at least this
    reinforce_step: float = 0.05  # a link a query walked gains this much ...
    max_weight: float = 1.0  # ... up to this
    prune_below: float = 0.05  # association links weaker than this are pruned ...
    prune_interval_days: float = 7.0  # ... this often
