"""The read path's pure stages: candidate fusion, one-hop waypoint expansion, composite scoring.

No IO here: the service fetches candidates and rows, these functions decide what they are worth.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from shared.scoring import (
    CONFLICT_PENALTY,
    STATUS_PENALTY,
    ScoreComponents,
    ScoreWeights,
    composite_score,
    confidence_factor,
    recency_score,
    rrf_fuse,
)


@dataclass
class Candidate:
    """Everything known about one memory on its way through the pipeline (becomes the trace)."""

    id: uuid.UUID
    lexical_rank: int | None = None
    lexical_score: float | None = None
    dense_rank: int | None = None
    dense_similarity: float | None = None
    rrf_score: float = 0.0
    hops: int = 0
    via: uuid.UUID | None = None
    trail: tuple[uuid.UUID, ...] = ()  # from the seed to `via`, for memories reached through waypoints
    waypoint_weight: float = 0.0
    activation: float = 0.0  # the relevance spread to it through waypoints (from its seed, or a linked seed's)
    support: float = 0.0  # the best relevance among the memories linked to it (context_support)
    support_from: uuid.UUID | None = None
    in_period: bool = False  # it occurred in the period the query names (time anchoring)
    period_rank: int | None = None  # its rank in the search of that period, when that search found it
    similarity: float = 0.0
    components: dict[str, float] = field(default_factory=dict)
    score: float = 0.0

    @property
    def path(self) -> list[str]:
        return [str(i) for i in (*self.trail, self.id)] if self.trail else [str(self.id)]

    @property
    def traversed(self) -> list[tuple[uuid.UUID, uuid.UUID]]:
        """The waypoints walked to reach this memory, in order."""
        steps = (*self.trail, self.id)
        return list(itertools.pairwise(steps))


def fuse(
    lexical: Sequence[tuple[uuid.UUID, float]],
    dense: Sequence[tuple[uuid.UUID, float]],
    *,
    rrf_k: int,
    limit: int,
) -> dict[uuid.UUID, Candidate]:
    """Reciprocal Rank Fusion of the two rankers; keeps the best `limit` (either list may be empty)."""
    fused = rrf_fuse([[i for i, _ in lexical], [i for i, _ in dense]], k=rrf_k)
    candidates: dict[uuid.UUID, Candidate] = {}
    for rank, (memory_id, score) in enumerate(lexical, start=1):
        candidates.setdefault(memory_id, Candidate(memory_id)).__dict__.update(lexical_rank=rank, lexical_score=score)
    for rank, (memory_id, sim) in enumerate(dense, start=1):
        candidates.setdefault(memory_id, Candidate(memory_id)).__dict__.update(dense_rank=rank, dense_similarity=sim)
    for memory_id, score in fused.items():
        candidates[memory_id].rrf_score = score
    best = sorted(candidates.values(), key=lambda c: (-c.rrf_score, str(c.id)))[:limit]
    return {c.id: c for c in best}


def spread_activation(
    seeds: dict[uuid.UUID, Candidate],
    links: Sequence[tuple[uuid.UUID, uuid.UUID, float]],
    *,
    max_hops: int,
    decay_per_hop: float,
    energy: Mapping[uuid.UUID, float] | None = None,
) -> dict[uuid.UUID, Candidate]:
    """OpenMem's spreading activation over waypoints: from every seed, both directions, up to `max_hops`;
    a memory reached by several paths keeps the strongest activation: the seed's energy (its relevance to
    the query, 1.0 when not given) times the product of the link weights times decay_per_hop per hop (max
    wins). Returns the memories reached that are not seeds themselves, each with that `activation`.

    A seed linked to another seed records the strongest direct link weight times that seed's energy (it
    earns the waypoint term for being linked to something else the query matches), and takes the activation
    that seed spreads to it, as a memory reached only through the link would (max wins; `via` names the seed
    that lent it). Without that, a weak direct hit next to a strong one ranked below a memory the query did not
    match at all in the same place: the answer after a matching question, when the answer's own words barely
    matched. It spreads no further itself on that activation (one hop, seed to seed).
    """
    adjacency: dict[uuid.UUID, list[tuple[uuid.UUID, float]]] = {}
    for src, dst, weight in links:
        adjacency.setdefault(src, []).append((dst, weight))
        adjacency.setdefault(dst, []).append((src, weight))
    start = energy or {}
    reached: dict[uuid.UUID, tuple[float, Candidate]] = {}
    # (memory, product of the link weights walked, the seed's energy, the path so far)
    frontier: list[tuple[uuid.UUID, float, float, tuple[uuid.UUID, ...]]] = [
        (i, 1.0, start.get(i, 1.0), ()) for i in seeds
    ]
    for hop in range(1, max_hops + 1):
        next_frontier = []
        for node, strength, seed_energy, trail in frontier:
            walked = (*trail, node)
            for other, weight in adjacency.get(node, ()):
                if other in walked:
                    continue
                if other in seeds:
                    if hop == 1:
                        linked = seeds[other]
                        linked.waypoint_weight = max(linked.waypoint_weight, weight * seed_energy)
                        lent = seed_energy * weight * decay_per_hop
                        if lent > linked.activation:
                            linked.activation, linked.via = lent, node
                    continue
                product = strength * weight
                activation = seed_energy * product * decay_per_hop**hop
                current = reached.get(other)
                if current is None or activation > current[0]:
                    reached[other] = (
                        activation,
                        Candidate(
                            other, hops=hop, via=node, trail=walked, waypoint_weight=product, activation=activation
                        ),
                    )
                next_frontier.append((other, product, seed_energy, walked))
        frontier = next_frontier
    return {memory_id: candidate for memory_id, (_, candidate) in reached.items()}


def context_support(
    relevance: Mapping[uuid.UUID, float],
    links: Sequence[tuple[uuid.UUID, uuid.UUID, float]],
    *,
    max_hops: int,
) -> dict[uuid.UUID, tuple[float, uuid.UUID]]:
    """How well what surrounds each memory matches the query: the best relevance among the memories linked
    to it within `max_hops` (both directions, through any memory), times the product of the link weights
    walked. Returns, for each memory in `relevance` that something lends to, (support, the memory lending it).

    The service passes the reading-order (`next`) links: a conversation's turns, a document's chunks. A turn
    answers in the words of the turns around it ("the early one, at seven" after "which ferry do you take?").
    Spreading activation gives a weak hit at most a decayed share of a strong neighbour's relevance (max
    wins); this adds the neighbourhood's best to the hit's own, so of two memories that match alike the one
    amid other matches ranks first. No decay per hop: on LoCoMo's tuning part the turn two away lends as much
    as the adjacent one (a question, its answer, the follow-up). Association links are not passed: they join
    memories that say the same thing, and lending along them cost SciFact 0.05 nDCG@10.
    """
    # Walked on small ints: hashing and comparing uuid.UUID objects is Python code, and it was most of the cost.
    ids = list(relevance)
    number = {memory_id: n for n, memory_id in enumerate(ids)}
    adjacency: dict[int, list[tuple[int, float]]] = {}

    def index(memory_id: uuid.UUID) -> int:  # one outside the scored set lends and gets nothing, but is walked
        n = number.get(memory_id)
        if n is None:
            n = number[memory_id] = len(ids)
            ids.append(memory_id)
        return n

    for src, dst, weight in links:
        a, b = index(src), index(dst)
        adjacency.setdefault(a, []).append((b, weight))
        adjacency.setdefault(b, []).append((a, weight))
    scored = len(relevance)
    best = [0.0] * scored
    lender = [-1] * scored
    for source, energy in enumerate(relevance.values()):
        if energy <= 0.0 or source not in adjacency:
            continue
        # (memory, the source's relevance times the link weights walked to it, the path so far)
        frontier: list[tuple[int, float, tuple[int, ...]]] = [(source, energy, (source,))]
        for hop in range(1, max_hops + 1):
            next_frontier = []
            for node, carried, walked in frontier:
                for other, weight in adjacency[node]:
                    if other in walked:
                        continue
                    lent = carried * weight
                    if other < scored and lent > best[other]:
                        best[other], lender[other] = lent, source
                    if hop < max_hops:
                        next_frontier.append((other, lent, (*walked, other)))
            frontier = next_frontier
    return {ids[n]: (best[n], ids[lender[n]]) for n in range(scored) if lender[n] >= 0}


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
    *,
    cosine: float | None,
    max_lexical: float,
    salience: float,
    last_seen_at: datetime,
    now: datetime,
    weights: ScoreWeights,
    fusion_alpha: float,
    hop_decay: float,
    recency_decay_per_day: float,
    status: str = "active",
    confidence: float = 1.0,
    confidence_weight: float = 0.0,
    context_weight: float = 0.0,
    period_weight: float = 0.0,
    lexical_power: float = 1.0,
    activation_weight: float = 1.0,
) -> float:
    """OpenMemory's composite (0.6 sim + 0.2 salience + 0.1 recency + 0.1 waypoint).

    `sim` is membox's fused relevance: decay^hops * (alpha * cosine + (1 - alpha) * lexical^lexical_power),
    so a memory found only by its words still has a similarity, and a linked memory is discounted per hop; a
    memory reached through waypoints keeps the larger of that and `activation_weight` times the activation
    spread to it (so the reply after a matching question ranks by the question's match). The sum is
    multiplied by OpenMem's status penalty (superseded 0.5, contradicted 0.3) and confidence factor.
    `context_weight` times the candidate's `support` (see context_support) is added to `sim`, and
    `period_weight` when the candidate occurred in the period the query names.
    """
    lexical = lexical_strength(candidate, max_lexical, lexical_power)
    own = relevance(
        candidate, cosine=cosine, max_lexical=max_lexical, fusion_alpha=fusion_alpha, lexical_power=lexical_power
    )
    fused = max((hop_decay**candidate.hops) * own, activation_weight * candidate.activation)
    context = context_weight * candidate.support
    period = period_weight if candidate.in_period else 0.0
    days = max((now - last_seen_at).total_seconds(), 0.0) / 86400.0
    components = ScoreComponents(
        similarity=fused + context + period,
        salience=salience,
        recency=recency_score(days, recency_decay_per_day),
        waypoint=candidate.waypoint_weight,
    )
    candidate.similarity = cosine or 0.0
    candidate.components = {
        "similarity": round(components.similarity, 6),
        "cosine": round(cosine or 0.0, 6),
        "lexical": round(lexical, 6),
        "salience": round(components.salience, 6),
        "recency": round(components.recency, 6),
        "waypoint": round(components.waypoint, 6),
    }
    if candidate.activation:
        candidate.components["activation"] = round(candidate.activation, 6)
    if context:
        candidate.components["context"] = round(context, 6)
    if period:
        candidate.components["period"] = round(period, 6)
    penalty = STATUS_PENALTY.get(status, 1.0)
    trust = confidence_factor(confidence, confidence_weight)
    if penalty != 1.0:
        candidate.components["status_penalty"] = penalty
    if trust != 1.0:
        candidate.components["confidence"] = round(trust, 6)
    candidate.score = composite_score(components, weights) * penalty * trust
    return candidate.score


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


def mmr_order(
    ranked: Sequence[uuid.UUID],
    relevance: dict[uuid.UUID, float],
    vectors: dict[uuid.UUID, np.ndarray],
    *,
    lambda_: float,
) -> list[tuple[uuid.UUID, float]]:
    """Maximal Marginal Relevance (Carbonell & Goldstein 1998; the Recall seed): re-order `ranked` so each
    next memory maximises lambda * relevance - (1 - lambda) * its highest cosine to those already chosen.

    Returns (id, redundancy) in the new order. Memories without a vector (or of another dimension) count
    as unrelated to the others. Ties keep the incoming order.
    """
    remaining = list(ranked)
    redundancy = dict.fromkeys(remaining, 0.0)  # highest cosine to anything chosen so far
    chosen: list[tuple[uuid.UUID, float]] = []
    while remaining:
        best = max(
            range(len(remaining)),
            key=lambda i: (lambda_ * relevance[remaining[i]] - (1 - lambda_) * redundancy[remaining[i]], -i),
        )
        picked = remaining.pop(best)
        chosen.append((picked, redundancy[picked]))
        vector = vectors.get(picked)
        if vector is None:
            continue
        for other in remaining:
            other_vector = vectors.get(other)
            if other_vector is not None and other_vector.shape == vector.shape:
                redundancy[other] = max(redundancy[other], float(other_vector @ vector))
    return chosen
