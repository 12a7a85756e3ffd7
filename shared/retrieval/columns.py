"""The scoring stage over columns: every candidate's composite score at once, in numpy.

The formulas are `scoring`'s (`score_candidate`, `use_priors`, `Aging.factor`), which stay the reference: a unit
test holds the two to 1e-9 on recorded candidates. A query scores ~100 candidates and returns a handful; one Python
object at a time that cost ~10 µs a candidate, most of it the two aging factors.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np

from shared.lifecycle.formulas import MEAN_SECTOR_LAMBDA, MIN_EXPONENT, Aging
from shared.retrieval.fusion import Candidate
from shared.retrieval.scoring import STATUS_PENALTY, ScoreComponents, ScoringParams, build_trace, resolve_conflicts

_DAY = 86400.0


def aging_factors(
    aging: Aging, salience: np.ndarray, coactivations: np.ndarray, decay_lambda: np.ndarray, days: np.ndarray
) -> np.ndarray:
    """`Aging.factor` of each memory; `decay_lambda` NaN where the memory has none (the tier's λ unscaled)."""
    rules = aging.tiers
    boosted = np.clip(salience * (1.0 + np.log1p(np.maximum(coactivations, 0))), 0.0, 1.0)
    recent = days < rules.recent_days
    hot = recent & ((coactivations > rules.hot_coactivations) | (boosted > rules.hot_salience))
    warm = recent | (boosted > rules.warm_salience)
    lambda_ = np.where(hot, rules.hot_lambda, np.where(warm, rules.warm_lambda, rules.cold_lambda))
    if aging.sector_scaling:
        lambda_ = np.where(np.isnan(decay_lambda), lambda_, lambda_ * (decay_lambda / MEAN_SECTOR_LAMBDA))
    return np.exp(np.maximum(MIN_EXPONENT, -lambda_ * np.maximum(days, 0.0) / (boosted + 0.1)))


class Priors:
    """What scoring reads of the candidates' rows, as columns (`MemoryState.of`'s fields, one array each)."""

    def __init__(self, rows: Sequence[Mapping[str, Any]], now: datetime) -> None:
        # one pass over the rows (a generator per column cost twice as much); the days as timedelta gives them
        table = np.array(
            [
                (
                    r["salience"],
                    r["confidence"],
                    r.get("recall_lift") or 0.0,
                    r.get("coactivations") or 0,
                    np.nan if (rate := r.get("decay_lambda")) is None else rate,
                    STATUS_PENALTY.get(r["status"], 1.0),
                    (now - r["last_seen_at"]).total_seconds(),
                    (now - (r.get("last_used_at") or r.get("created_at") or r["last_seen_at"])).total_seconds(),
                )
                for r in rows
            ],
            dtype=float,
        ).reshape(-1, 8)
        self.salience, self.confidence, self.recall_lift, self.coactivations = table[:, :4].T
        self.decay_lambda, self.penalty = table[:, 4], table[:, 5]
        self.seen_days, self.used_days = table[:, 6] / _DAY, table[:, 7] / _DAY


def use_priors(priors: Priors, p: ScoringParams) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`scoring.use_priors` of every memory: (salience, recency, aging factor) as ranking reads them."""
    seen = np.maximum(priors.seen_days, 0.0)
    used = np.maximum(priors.used_days, 0.0)
    lift = np.minimum(np.maximum(priors.recall_lift, 0.0), priors.salience)
    base = priors.salience - lift
    if p.aging is not None:
        aged = aging_factors(p.aging, priors.salience, priors.coactivations, priors.decay_lambda, seen)
        later = used > seen
        unreturned_aged = np.where(
            later, aging_factors(p.aging, base, np.zeros_like(base), priors.decay_lambda, used), aged
        )
    else:
        aged = unreturned_aged = np.ones_like(base)
    as_is, unreturned = priors.salience * aged, base * unreturned_aged
    recency_as_is = np.exp(-p.recency_decay_per_day * seen)
    recency_unreturned = np.where(used == seen, recency_as_is, np.exp(-p.recency_decay_per_day * used))
    share = p.recall_share
    return (
        unreturned + share * (as_is - unreturned),
        recency_unreturned + share * (recency_as_is - recency_unreturned),
        aged,
    )


def score_columns(
    candidates: Sequence[Candidate],
    rows: Sequence[Mapping[str, Any]],
    cosines: Sequence[float | None],
    *,
    max_lexical: float,
    now: datetime,
    params: ScoringParams,
) -> np.ndarray:
    """`score_candidate` of each candidate (its row and cosine beside it, in the same order), computed over columns:
    each candidate's `relevance`, `similarity` and `score` set, and its trace left to build when first read.
    Returns the recency component of each (conflicts weigh it)."""
    n = len(candidates)
    if n == 0:
        return np.zeros(0)
    p = params
    table = np.array(  # one pass over the candidates; None is NaN
        [
            (
                np.nan if cosine is None else cosine,
                np.nan if c.lexical_score is None else c.lexical_score,
                c.hops,
                c.activation,
                c.inherited,
                c.support,
                c.in_period,
                c.waypoint_weight,
            )
            for c, cosine in zip(candidates, cosines, strict=True)
        ],
        dtype=float,
    )
    cosine, scores, hops, activation, inherited, support, in_period, waypoint = table.T
    measured = ~np.isnan(cosine)
    lexical = np.zeros(n)
    if max_lexical > 0:
        found = ~np.isnan(scores)
        lexical[found] = (scores[found] / max_lexical) ** p.lexical_power
    own = np.where(measured, p.fusion_alpha * np.maximum(cosine, 0.0) + (1 - p.fusion_alpha) * lexical, lexical)
    fused = np.maximum(np.maximum(p.hop_decay**hops * own, p.activation_weight * activation), inherited)
    context = p.context_weight * support
    period = np.where(in_period > 0, p.period_weight, 0.0)
    relevance = fused + context + period
    priors = Priors(rows, now)
    salience, recency, aged = use_priors(priors, p)
    trust = 1.0 - p.confidence_weight * (1.0 - np.clip(priors.confidence, 0.0, 1.0))
    w = p.weights
    composite = w.similarity * relevance + w.salience * salience + w.recency * recency + w.waypoint * waypoint
    score = composite * priors.penalty * trust
    measures = _Measures(
        relevance.tolist(),
        salience.tolist(),
        recency.tolist(),
        lexical.tolist(),
        aged.tolist(),
        priors.recall_lift.tolist(),
        context.tolist(),
        period.tolist(),
        priors.penalty.tolist(),
        trust.tolist(),
        list(cosines),
        waypoint.tolist(),
        activation.tolist(),
        inherited.tolist(),
    )
    similarity = np.where(measured, cosine, 0.0).tolist()
    for i, (c, rel, sim, total) in enumerate(
        zip(candidates, measures.relevance, similarity, score.tolist(), strict=True)
    ):
        c.relevance, c.similarity, c.score = rel, sim, total
        c.trace_later(measures.trace, i)
    return recency


class _Measures(NamedTuple):
    """The columns a candidate's trace is built from, as lists; read only for the few returned."""

    relevance: list[float]
    salience: list[float]
    recency: list[float]
    lexical: list[float]
    aged: list[float]
    recall_lift: list[float]
    context: list[float]
    period: list[float]
    penalty: list[float]
    trust: list[float]
    cosine: list[float | None]
    waypoint: list[float]
    activation: list[float]
    inherited: list[float]

    def trace(self, i: int) -> dict[str, float]:
        """Row `i`'s trace, as `score_candidate` builds it."""
        components = ScoreComponents(self.relevance[i], self.salience[i], self.recency[i], self.waypoint[i])
        return build_trace(
            components,
            self.cosine[i],
            self.lexical[i],
            self.aged[i],
            self.recall_lift[i],
            self.activation[i],
            self.context[i],
            self.period[i],
            self.penalty[i],
            self.trust[i],
            self.inherited[i],
        )


def score_all(
    candidates: Mapping[uuid.UUID, Candidate],
    rows: Mapping[uuid.UUID, dict[str, Any]],
    cosines: Mapping[uuid.UUID, float | None],
    contradicts: Sequence[tuple[uuid.UUID, uuid.UUID]],
    *,
    max_lexical: float,
    now: datetime,
    params: ScoringParams,
    fusion_only: bool = False,
) -> list[tuple[Candidate, dict[str, Any]]]:
    """Stage 3 of the read path: every candidate with a row scored (`score_columns`: the composite, its trace), then
    OpenMem's conflict resolution. `fusion_only`: the fused rank alone is the score (what the rankers found, before any
    weighting). Returns (candidate, row) pairs in the candidates' order."""
    scored = [(candidate, rows[memory_id]) for memory_id, candidate in candidates.items() if memory_id in rows]
    recency = score_columns(
        [c for c, _ in scored],
        [row for _, row in scored],
        [cosines.get(c.id) for c, _ in scored],
        max_lexical=max_lexical,
        now=now,
        params=params,
    )
    if contradicts and not fusion_only:
        strength = {  # OpenMem's effective strength: salience x confidence x recency (as the trace rounds it)
            c.id: float(row["salience"]) * float(row["confidence"]) * round(r, 6)
            for (c, row), r in zip(scored, recency.tolist(), strict=True)
        }
        resolve_conflicts({c.id: c for c, _ in scored}, contradicts, strength, penalty=params.conflict_penalty)
    if fusion_only:
        for candidate, _ in scored:
            candidate.score = candidate.rrf_score
    return scored
