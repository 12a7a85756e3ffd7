"""Waypoints at query time: spreading activation from the hits, and the support a memory's neighbours lend.

Pure: the read path fetches the links (`storage.neighbours.fetch_with_links`); these functions walk them.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence

from shared.retrieval.fusion import Candidate


def spread_activation(
    hits: dict[uuid.UUID, Candidate],
    links: Sequence[tuple[uuid.UUID, uuid.UUID, float]],
    *,
    max_hops: int,
    decay_per_hop: float,
    energy: Mapping[uuid.UUID, float] | None = None,
    silent: Mapping[uuid.UUID, Collection[uuid.UUID]] | None = None,
) -> dict[uuid.UUID, Candidate]:
    """OpenMem's spreading activation over waypoints: from every hit, both directions, up to `max_hops`;
    a memory reached by several paths keeps the strongest activation: the hit's energy (its relevance to
    the query, 1.0 when not given) times the product of the link weights times decay_per_hop per hop (max
    wins). Returns the memories reached that are not hits themselves, each with that `activation`.

    A hit linked to another hit records the strongest direct link weight times that hit's energy (it earns
    the waypoint term for being linked to something else the query matches), and takes the activation that
    hit spreads to it, as a memory reached only through the link would (max wins; `via` names the hit that
    lent it). Without that, a weak hit next to a strong one ranked below a memory the query did not match at
    all in the same place: the answer after a matching question, when the answer's own words barely
    matched. It spreads no further itself on that activation (one hop, hit to hit).

    `silent`: memories that lend nothing (a superseded memory: the fact it states is no longer true, and what was said
    around it is no answer to a question about the fact now), each with the memories it may still lend to (its
    successors); activation neither starts from them nor passes through them to anything else.
    """
    adjacency: dict[uuid.UUID, list[tuple[uuid.UUID, float]]] = {}
    for src, dst, weight in links:
        adjacency.setdefault(src, []).append((dst, weight))
        adjacency.setdefault(dst, []).append((src, weight))
    start = energy or {}
    quiet = silent or {}
    reached: dict[uuid.UUID, tuple[float, Candidate]] = {}
    # (memory, product of the link weights walked, the hit's energy, the path so far)
    frontier: list[tuple[uuid.UUID, float, float, tuple[uuid.UUID, ...]]] = [
        (i, 1.0, start.get(i, 1.0), ()) for i in hits
    ]
    for hop in range(1, max_hops + 1):
        next_frontier = []
        for node, strength, hit_energy, trail in frontier:
            walked = (*trail, node)
            muted = quiet.get(node)
            for other, weight in adjacency.get(node, ()):
                if other in walked or (muted is not None and other not in muted):
                    continue
                if other in hits:
                    if hop == 1:
                        linked = hits[other]
                        linked.waypoint_weight = max(linked.waypoint_weight, weight * hit_energy)
                        lent = hit_energy * weight * decay_per_hop
                        if lent > linked.activation:
                            linked.activation, linked.via = lent, node
                    continue
                product = strength * weight
                activation = hit_energy * product * decay_per_hop**hop
                current = reached.get(other)
                if current is None or activation > current[0]:
                    reached[other] = (
                        activation,
                        Candidate(
                            other, hops=hop, via=node, trail=walked, waypoint_weight=product, activation=activation
                        ),
                    )
                next_frontier.append((other, product, hit_energy, walked))
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
