"""The read path's scoring stage over a query's candidates at once: `scoring.score_candidate`'s formulas on arrays.

A query scores ~100 candidates; one Python call per candidate through the scalar formulas (the decay seed's aging
twice, recency twice, relevance) was ~1.2 ms of a query at 100k. Here each input becomes a column and each formula
one numpy operation over them, in the scalar code's order of operations, so the scores are the scalar ones (the
unit tests hold them to 1e-9 on recorded candidates). `scoring.score_candidate` stays the reference: one candidate,
readable, and what the tests compare with.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from shared.lifecycle.formulas import MEAN_SECTOR_LAMBDA, MIN_EXPONENT, Aging
from shared.retrieval.fusion import Candidate
from shared.retrieval.scoring import (
    STATUS_PENALTY,
    ScoreComponents,
    ScoringParams,
    resolve_conflicts,
    trace_of,
)

SECONDS_A_DAY = 86400.0


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
    """Stage 3 of the read path: every candidate with a row scored (the composite, its trace), then OpenMem's
    conflict resolution. `fusion_only`: the fused rank alone is the score (what the rankers found, before any
    weighting). Returns (candidate, row) pairs in the candidates' order."""
    scored = [(candidate, rows[memory_id]) for memory_id, candidate in candidates.items() if memory_id in rows]
    if scored:
        score_candidates(
            [c for c, _ in scored],
            [row for _, row in scored],
            [cosines.get(c.id) for c, _ in scored],
            max_lexical=max_lexical,
            now=now,
            params=params,
        )
    if contradicts and not fusion_only:
        strength = {  # OpenMem's effective strength: salience x confidence x recency
            c.id: float(row["salience"]) * float(row["confidence"]) * c.components.get("recency", 0.0)
            for c, row in scored
        }
        resolve_conflicts({c.id: c for c, _ in scored}, contradicts, strength, penalty=params.conflict_penalty)
    if fusion_only:
        for candidate, _ in scored:
            candidate.score = candidate.rrf_score
    return scored


def score_candidates(
    candidates: Sequence[Candidate],
    rows: Sequence[Mapping[str, Any]],
    cosines: Sequence[float | None],
    *,
    max_lexical: float,
    now: datetime,
    params: ScoringParams,
) -> np.ndarray:
    """`scoring.score_candidate` for each candidate with its memory's row (storage's lean columns) and cosine (None:
    no vector to compare): the composite stored on each candidate with its relevance, similarity and trace, and
    returned as an array."""
    p = params
    nan = float("nan")
    cosine = np.array([nan if c is None else c for c in cosines], dtype=np.float64)
    has_cosine = ~np.isnan(cosine)
    lexical_score = np.array([nan if c.lexical_score is None else c.lexical_score for c in candidates])
    hops = np.array([c.hops for c in candidates], dtype=np.float64)
    activation = np.array([c.activation for c in candidates], dtype=np.float64)
    inherited = np.array([c.inherited for c in candidates], dtype=np.float64)
    support = np.array([c.support for c in candidates], dtype=np.float64)
    in_period = np.array([c.in_period for c in candidates], dtype=bool)
    waypoint = np.array([c.waypoint_weight for c in candidates], dtype=np.float64)

    if max_lexical > 0:
        lexical = np.where(
            np.isnan(lexical_score), 0.0, (np.nan_to_num(lexical_score) / max_lexical) ** p.lexical_power
        )
    else:
        lexical = np.zeros(len(candidates))
    own = np.where(
        has_cosine, p.fusion_alpha * np.maximum(np.nan_to_num(cosine), 0.0) + (1 - p.fusion_alpha) * lexical, lexical
    )
    fused = np.maximum(np.maximum((p.hop_decay**hops) * own, p.activation_weight * activation), inherited)
    context = p.context_weight * support
    period = np.where(in_period, p.period_weight, 0.0)
    relevance = fused + context + period

    salience, recency, aged, recall_lift = _priors(rows, now, p)
    penalty = np.array([STATUS_PENALTY.get(str(row["status"]), 1.0) for row in rows], dtype=np.float64)
    confidence = np.array([float(row["confidence"]) for row in rows], dtype=np.float64)
    trust = 1.0 - p.confidence_weight * (1.0 - np.minimum(np.maximum(confidence, 0.0), 1.0))
    w = p.weights
    score = (w.similarity * relevance + w.salience * salience + w.recency * recency + w.waypoint * waypoint) * penalty
    score = score * trust

    for i, candidate in enumerate(candidates):
        candidate.relevance = float(relevance[i])
        candidate.similarity = float(cosine[i]) if has_cosine[i] else 0.0
        candidate.trace_later(
            trace_of,
            ScoreComponents(candidate.relevance, float(salience[i]), float(recency[i]), candidate.waypoint_weight),
            cosines[i],
            float(lexical[i]),
            float(aged[i]),
            float(recall_lift[i]),
            candidate.activation,
            float(context[i]),
            float(period[i]),
            float(penalty[i]),
            float(trust[i]),
            candidate.inherited,
        )
        candidate.score = float(score[i])
    return score


def _priors(
    rows: Sequence[Mapping[str, Any]], now: datetime, p: ScoringParams
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`scoring.use_priors` over the rows: (salience, recency, aging factor, recall lift as stored)."""
    seen_days, used_days = [], []
    for row in rows:
        seen = row["last_seen_at"]
        used = row.get("last_used_at") or row.get("created_at")
        seen_days.append(max((now - seen).total_seconds(), 0.0) / SECONDS_A_DAY)
        used_days.append(max((now - (used if used is not None else seen)).total_seconds(), 0.0) / SECONDS_A_DAY)
    seen_d = np.array(seen_days, dtype=np.float64)
    used_d = np.array(used_days, dtype=np.float64)
    salience = np.array([float(row["salience"]) for row in rows], dtype=np.float64)
    recall_lift = np.array([float(row.get("recall_lift") or 0.0) for row in rows], dtype=np.float64)
    coactivations = np.array([int(row.get("coactivations") or 0) for row in rows], dtype=np.float64)
    decay_lambda = np.array(
        [float("nan") if row.get("decay_lambda") is None else float(row["decay_lambda"]) for row in rows],
        dtype=np.float64,
    )
    lift = np.minimum(np.maximum(recall_lift, 0.0), salience)
    base = salience - lift
    if p.aging is not None:
        aged = aging_factors(p.aging, salience, coactivations, decay_lambda, seen_d)
        later = used_d > seen_d
        unreturned_aged = np.where(later, aging_factors(p.aging, base, np.zeros_like(base), decay_lambda, used_d), aged)
    else:
        aged = unreturned_aged = np.ones_like(salience)
    as_is, unreturned = salience * aged, base * unreturned_aged
    recency_as_is = np.exp(-p.recency_decay_per_day * np.maximum(seen_d, 0.0))
    recency_unreturned = np.where(
        used_d == seen_d, recency_as_is, np.exp(-p.recency_decay_per_day * np.maximum(used_d, 0.0))
    )
    share = p.recall_share
    return (
        unreturned + share * (as_is - unreturned),
        recency_unreturned + share * (recency_as_is - recency_unreturned),
        aged,
        recall_lift,
    )


def aging_factors(
    aging: Aging, salience: np.ndarray, coactivations: np.ndarray, decay_lambda: np.ndarray, days: np.ndarray
) -> np.ndarray:
    """`Aging.factor` over arrays (`decay_lambda` NaN where a memory has none): the decay seed's tier, its λ scaled
    by the sector's rate, exp(-λ × days / (boosted salience + 0.1))."""
    rules = aging.tiers
    boosted = np.minimum(1.0, np.maximum(0.0, salience * (1.0 + np.log1p(np.maximum(0.0, coactivations)))))
    recent = days < rules.recent_days
    hot = recent & ((coactivations > rules.hot_coactivations) | (boosted > rules.hot_salience))
    warm = ~hot & (recent | (boosted > rules.warm_salience))
    lambda_ = np.where(hot, rules.hot_lambda, np.where(warm, rules.warm_lambda, rules.cold_lambda))
    if aging.sector_scaling:
        lambda_ = np.where(
            np.isnan(decay_lambda), lambda_, lambda_ * (np.nan_to_num(decay_lambda) / MEAN_SECTOR_LAMBDA)
        )
    return np.exp(np.maximum(MIN_EXPONENT, -lambda_ * np.maximum(0.0, days) / (boosted + 0.1)))
