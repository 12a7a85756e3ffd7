"""The read path's scoring stage, pure: relevance, OpenMemory's composite score, conflicts.

Every knob is a field of `ScoringParams` (built from settings: `Settings.scoring`); the defaults are the
seeds' (composite weights, recency, status penalty, conflict penalty) and the values tuned on both
evaluation sets (fusion alpha, lexical power, activation, context and period weights: docs/retrieval.md).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np

from shared.lifecycle.formulas import Aging
from shared.retrieval.fusion import Candidate


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


class ScoreComponents(NamedTuple):
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


@dataclass(frozen=True)
class ScoringParams:
    """What scoring weighs, one object (`Settings.scoring` builds it; defaults are the product's)."""

    weights: ScoreWeights = field(default_factory=ScoreWeights)
    # membox fusion: relevance = hop_decay^hops * (alpha*cosine + (1-alpha)*lexical); 0.7 is best on the tuning
    # parts of both evaluation sets once sequence turns are embedded in context
    fusion_alpha: float = 0.7
    # The lexical strength (BM25 / the best BM25 of the query) is raised to this power: a memory sharing one
    # or two of the query's words keeps less than its share of the best match's credit (1 = linear; 2 is best
    # on both tuning parts, 1.25-2.5 a plateau)
    lexical_power: float = 2.0
    hop_decay: float = 0.5  # per waypoint hop (OpenMem: decay_per_hop 0.5)
    # How much of the activation spread to a memory counts in its similarity (1 = all): context support
    # already adds what surrounds a memory, at full weight a neighbour's match counted twice
    activation_weight: float = 0.5
    # Context support: the best relevance within two reading-order links, times this, added to `sim`
    context_weight: float = 0.4
    # Time anchoring: added to `sim` of a memory that occurred in the period the query names
    period_weight: float = 0.5
    recency_decay_per_day: float = 0.05  # OpenMem's exp(-0.05 x days)
    # OpenMem: confidence weighs 0.1 (a memory keeps 1 - 0.1 x (1 - confidence) of its score); the weaker of
    # two memories joined by a `contradicts` edge is multiplied by 0.3
    confidence_weight: float = 0.1
    conflict_penalty: float = CONFLICT_PENALTY
    # Recall's recency_weight interpolation instead of the fixed weights, when set (a request may override)
    recency_weight: float | None = None
    # The share of the salience a memory gained by being returned by queries (its recall lift) that counts in
    # ranking. The whole lift still feeds decay and tiers (the seeds' reinforcement); what the writer gave, an
    # explicit "I used this" (POST /memory/reinforce) and what decay took count in full. 1 = OpenMemory's
    # ranking, where a memory returned before outranks better matches (docs/retrieval.md#reinforcement)
    recall_share: float = 0.1
    # Salience is read as decayed to the query's time (the decay seed's formula, with the lifecycle's tier rules:
    # Settings.scoring sets them), not as the decay cycle last left it; None reads it as stored
    aging: Aging | None = field(default_factory=Aging)

    def for_request(self, recency_weight: float | None) -> ScoringParams:
        """These parameters for one query: its recency_weight (else the configured one) sets the weights."""
        chosen = recency_weight if recency_weight is not None else self.recency_weight
        return self if chosen is None else replace(self, weights=recency_interpolated(chosen))


class MemoryState(NamedTuple):
    """What scoring reads of a memory's row besides its match (a tuple: one is made for every candidate of every
    query, and a frozen dataclass cost three times as much to make)."""

    salience: float
    last_seen_at: datetime
    status: str = "active"
    confidence: float = 1.0
    recall_lift: float = 0.0  # the part of `salience` that being returned by queries added
    coactivations: int = 0
    decay_lambda: float | None = None  # its sector's decay rate (None: the tier's λ unscaled)
    # when it was last used other than by being returned (stored, or confirmed by a client); None: last seen
    last_used_at: datetime | None = None

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> MemoryState:
        """From a memory row (storage's lean columns)."""
        decay_lambda = row.get("decay_lambda")
        return cls(
            float(row["salience"]),
            row["last_seen_at"],
            str(row["status"]),
            float(row["confidence"]),
            float(row.get("recall_lift") or 0.0),
            int(row.get("coactivations") or 0),
            None if decay_lambda is None else float(decay_lambda),
            row.get("last_used_at") or row.get("created_at"),
        )


def use_priors(memory: MemoryState, now: datetime, p: ScoringParams) -> tuple[float, float, float]:
    """The salience and recency ranking reads, and the aging factor of the salience: (salience, recency, aging).

    Being returned by a query raises salience (its recall lift) and refreshes `last_seen_at`, which keeps the
    memory from decaying and makes it recent: all of that is the seeds' and feeds decay and tiers. Ranking counts
    `recall_share` of it. The memory as it would be had queries not returned it — its salience less the lift,
    decayed and aged since it was last used — plus that share of the difference to the memory as it is. A memory
    no query returned since it was last used ranks as it is."""
    seen_days = max((now - memory.last_seen_at).total_seconds(), 0.0) / 86400.0
    used_at = memory.last_used_at if memory.last_used_at is not None else memory.last_seen_at
    used_days = max((now - used_at).total_seconds(), 0.0) / 86400.0
    lift = min(max(memory.recall_lift, 0.0), memory.salience)
    base = memory.salience - lift
    if p.aging is not None:
        aged = p.aging.factor(memory.salience, memory.coactivations, memory.decay_lambda, seen_days)
        unreturned_aged = p.aging.factor(base, 0, memory.decay_lambda, used_days) if used_days > seen_days else aged
    else:
        aged = unreturned_aged = 1.0
    as_is, unreturned = memory.salience * aged, base * unreturned_aged
    recency_as_is = recency_score(seen_days, p.recency_decay_per_day)
    recency_unreturned = recency_as_is if used_days == seen_days else recency_score(used_days, p.recency_decay_per_day)
    share = p.recall_share
    salience = unreturned + share * (as_is - unreturned)
    recency = recency_unreturned + share * (recency_as_is - recency_unreturned)
    return salience, recency, aged


def lexical_strength(candidate: Candidate, max_lexical: float, power: float = 1.0) -> float:
    """The lexical score scaled to [0, 1] by the best in this result set (membox's normalisation), raised to
    `power`: above 1, a memory that shares only some of the query's words (a name, one common term) keeps
    less of the best match's credit than its share of the score."""
    if candidate.lexical_score is None or max_lexical <= 0:
        return 0.0
    return (candidate.lexical_score / max_lexical) ** power


def relevance(
    candidate: Candidate, *, cosine: float | None, max_lexical: float, fusion_alpha: float, lexical_power: float = 1.0
) -> float:
    """membox's fused relevance of a memory to the query: alpha * cosine + (1 - alpha) * lexical strength.

    `cosine` None: the memory has no vector to compare with the query (decay left it a fingerprint), so its
    words alone say how relevant it is; a missing measurement is not a cosine of 0."""
    lexical = lexical_strength(candidate, max_lexical, lexical_power)
    if cosine is None:
        return lexical
    return fusion_alpha * max(cosine, 0.0) + (1 - fusion_alpha) * lexical


def score_candidate(
    candidate: Candidate,
    memory: MemoryState,
    *,
    cosine: float | None,
    max_lexical: float,
    now: datetime,
    params: ScoringParams,
) -> float:
    """OpenMemory's composite (0.6 sim + 0.2 salience + 0.1 recency + 0.1 waypoint), stored on the candidate
    with its components (the trace, built when first read: `Candidate.components`) and returned.

    `sim` is membox's fused relevance: hop_decay^hops * (alpha * cosine + (1 - alpha) * lexical^lexical_power),
    so a memory found only by its words still has a similarity, and a linked memory is discounted per hop; a
    memory reached through waypoints keeps the larger of that and `activation_weight` times the activation
    spread to it (so the reply after a matching question ranks by the question's match), and a memory that
    supersedes a candidate at least the older version's relevance (`inherited`). `context_weight`
    times the candidate's `support` (graph.context_support) is added to `sim`, and `period_weight` when the
    candidate occurred in the period the query names. The sum is multiplied by OpenMem's status penalty
    (superseded 0.5, contradicted 0.3) and confidence factor. `max_lexical`: the best BM25 score of the query.
    """
    p = params
    lexical = lexical_strength(candidate, max_lexical, p.lexical_power)
    own = relevance(
        candidate, cosine=cosine, max_lexical=max_lexical, fusion_alpha=p.fusion_alpha, lexical_power=p.lexical_power
    )
    fused = max((p.hop_decay**candidate.hops) * own, p.activation_weight * candidate.activation, candidate.inherited)
    context = p.context_weight * candidate.support
    period = p.period_weight if candidate.in_period else 0.0
    candidate.relevance = fused + context + period
    salience, recency, aged = use_priors(memory, now, p)
    components = ScoreComponents(candidate.relevance, salience, recency, candidate.waypoint_weight)
    candidate.similarity = cosine or 0.0
    penalty = STATUS_PENALTY.get(memory.status, 1.0)
    trust = confidence_factor(memory.confidence, p.confidence_weight)
    candidate.trace_later(
        build_trace,
        components,
        cosine,
        lexical,
        aged,
        memory.recall_lift,
        candidate.activation,
        context,
        period,
        penalty,
        trust,
        candidate.inherited,
    )
    candidate.score = composite_score(components, p.weights) * penalty * trust
    return candidate.score


def build_trace(
    components: ScoreComponents,
    cosine: float | None,
    lexical: float,
    aged: float,
    recall_lift: float,
    activation: float,
    context: float,
    period: float,
    penalty: float,
    trust: float,
    inherited: float,
) -> dict[str, float]:
    """A scored candidate's trace: the composite's components and what shaped them, rounded (`score_candidate`)."""
    trace = {
        "similarity": round(components.similarity, 6),
        "cosine": round(cosine or 0.0, 6),
        "lexical": round(lexical, 6),
        "salience": round(components.salience, 6),
        "recency": round(components.recency, 6),
        "waypoint": round(components.waypoint, 6),
    }
    if aged < 0.9995:
        trace["aging"] = round(aged, 6)
    if recall_lift > 0:
        trace["recall_lift"] = round(recall_lift, 6)
    if activation:
        trace["activation"] = round(activation, 6)
    if context:
        trace["context"] = round(context, 6)
    if period:
        trace["period"] = round(period, 6)
    if inherited:
        trace["inherited"] = round(inherited, 6)
    if penalty != 1.0:
        trace["status_penalty"] = penalty
    if trust != 1.0:
        trace["confidence"] = round(trust, 6)
    return trace


def resolve_conflicts(
    candidates: dict[uuid.UUID, Candidate],
    contradicts: Sequence[tuple[uuid.UUID, uuid.UUID]],
    strength: dict[uuid.UUID, float],
    *,
    penalty: float = CONFLICT_PENALTY,
) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """OpenMem's conflict resolution: of two scored memories joined by a `contradicts` edge, the one with
    the lower effective strength (salience x confidence x recency) has its score multiplied by `penalty`.

    Returns (demoted, by) pairs. A memory demoted by several conflicts is demoted once.
    """
    demoted: list[tuple[uuid.UUID, uuid.UUID]] = []
    seen: set[uuid.UUID] = set()
    for a, b in contradicts:
        if a not in candidates or b not in candidates:
            continue
        key_a = (strength.get(a, 0.0), candidates[a].score, str(a))
        key_b = (strength.get(b, 0.0), candidates[b].score, str(b))
        weaker, stronger = (a, b) if key_a < key_b else (b, a)
        if weaker in seen:
            continue
        seen.add(weaker)
        candidates[weaker].score *= penalty
        candidates[weaker].components["conflict_penalty"] = penalty
        demoted.append((weaker, stronger))
    return demoted
