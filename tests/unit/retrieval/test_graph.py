"""Spreading activation from the hits, and the support a memory's neighbours in reading order lend."""

from __future__ import annotations

import uuid

import pytest

from shared.retrieval.fusion import Candidate
from shared.retrieval.graph import context_support, spread_activation
from tests.unit.retrieval.helpers import A, B, C, D, score


def test_expand_one_hop_follows_links_both_ways_and_max_wins():
    hits = {A: Candidate(A), B: Candidate(B)}
    links = [(A, C, 0.4), (D, B, 0.8), (B, C, 0.9), (A, B, 0.7)]
    expanded = spread_activation(hits, links, max_hops=1, decay_per_hop=0.5)
    assert set(expanded) == {C, D}
    assert expanded[C].via == B and expanded[C].waypoint_weight == pytest.approx(0.9)
    assert expanded[D].via == B and expanded[D].hops == 1  # reached against the link's direction
    assert hits[B].waypoint_weight == pytest.approx(0.7)  # a hit linked to a hit records the weight
    assert expanded[C].path == [str(B), str(C)]


def test_activation_spreads_two_hops_both_ways_and_the_strongest_path_wins():
    E = uuid.UUID(int=5)
    hits = {A: Candidate(A)}
    links = [(A, B, 0.9), (C, B, 0.8), (A, D, 0.2), (D, C, 0.9), (E, C, 1.0)]  # E is three hops away
    reached = spread_activation(hits, links, max_hops=2, decay_per_hop=0.5)
    assert set(reached) == {B, C, D}
    # C: A-B-C (0.9 * 0.8 = 0.72) beats A-D-C (0.2 * 0.9 = 0.18); reached against B->C's direction
    assert (reached[C].hops, reached[C].via, reached[C].trail) == (2, B, (A, B))
    assert reached[C].waypoint_weight == pytest.approx(0.72)
    assert reached[C].path == [str(A), str(B), str(C)] and reached[C].traversed == [(A, B), (B, C)]
    assert reached[D].hops == 1  # one weak hop still beats its own two-hop detour
    assert set(spread_activation(hits, links, max_hops=1, decay_per_hop=0.5)) == {B, D}


def test_a_strong_two_hop_path_can_beat_a_weak_direct_link():
    hits = {A: Candidate(A)}
    reached = spread_activation(hits, [(A, C, 0.1), (A, B, 1.0), (B, C, 1.0)], max_hops=2, decay_per_hop=0.5)
    assert reached[C].hops == 2  # 1.0 * 1.0 * 0.25 > 0.1 * 0.5: max wins


def test_each_hit_spreads_its_own_relevance_and_the_strongest_arrival_wins():
    hits = {A: Candidate(A), B: Candidate(B)}
    links = [(A, C, 1.0), (B, C, 1.0), (B, D, 0.5)]
    reached = spread_activation(hits, links, max_hops=1, decay_per_hop=0.5, energy={A: 0.3, B: 0.8})
    assert reached[C].via == B and reached[C].activation == pytest.approx(0.8 * 1.0 * 0.5)
    assert reached[D].activation == pytest.approx(0.8 * 0.5 * 0.5)
    assert reached[C].waypoint_weight == pytest.approx(1.0)  # the links walked, not the energy
    # without energies every hit counts as fully relevant
    plain = spread_activation(hits, links, max_hops=1, decay_per_hop=0.5)
    assert plain[C].activation == pytest.approx(0.5)
    # a hit linked to a hit earns the link weight times the other hit's relevance
    linked = {A: Candidate(A), B: Candidate(B)}
    spread_activation(linked, [(A, B, 0.9)], max_hops=1, decay_per_hop=0.5, energy={A: 0.5, B: 0.2})
    assert linked[B].waypoint_weight == pytest.approx(0.9 * 0.5) and linked[A].waypoint_weight == pytest.approx(
        0.9 * 0.2
    )


def test_a_weak_direct_hit_next_to_a_strong_one_ranks_as_if_the_strong_one_reached_it():
    # A: the question that matches; B: the answer after it, a weak hit of its own; C: a non-hit after B's place.
    hits = {A: Candidate(A), B: Candidate(B)}
    reached = spread_activation(
        hits, [(A, B, 1.0), (A, C, 1.0)], max_hops=1, decay_per_hop=0.5, energy={A: 0.8, B: 0.1}
    )
    assert reached[C].activation == pytest.approx(0.4)
    assert hits[B].activation == pytest.approx(0.8 * 1.0 * 0.5) and hits[B].via == A
    assert hits[A].activation == pytest.approx(0.1 * 0.5)  # lent in both directions; max wins below
    assert hits[B].hops == 0 and hits[B].path == [str(B)]  # still a direct hit, walked nowhere
    score(hits[B], cosine=0.1, max_lexical=2.0)
    score(reached[C], cosine=0.1, max_lexical=2.0)
    assert hits[B].components["similarity"] == pytest.approx(0.4) == reached[C].components["similarity"]
    assert hits[B].components["activation"] == pytest.approx(0.4)
    score(hits[A], cosine=0.9, max_lexical=2.0)
    assert hits[A].components["similarity"] == pytest.approx(0.5 * 0.9)  # its own match is the larger


def test_context_support_lends_the_best_linked_relevance_within_the_hops_both_ways():
    # A - B - C - D in reading order (weights 1.0, 0.5, 1.0); E hangs off A by an association of 0.5.
    E = uuid.UUID(int=5)
    links = [(A, B, 1.0), (B, C, 0.5), (C, D, 1.0), (E, A, 0.5)]
    own = {A: 0.9, B: 0.1, C: 0.0, D: 0.6, E: 0.3}
    support = context_support(own, links, max_hops=2)
    assert support[B] == pytest.approx((0.9, A))  # A (0.9 x 1.0) beats D two hops off (0.6 x 1.0 x 0.5)
    assert support[C] == pytest.approx((0.6, D))  # D beats A two hops off (0.9 x 1.0 x 0.5 = 0.45)
    assert support[A] == pytest.approx((0.15, E))  # against the link's direction: E (0.3 x 0.5) beats B (0.1)
    assert support[D] == pytest.approx((0.05, B))  # through C, which lends nothing itself; no decay per hop
    assert support[E] == pytest.approx((0.45, A))
    assert D not in context_support(own, links, max_hops=1)  # its only neighbour, C, matches nothing


def test_context_support_ignores_memories_outside_the_scored_set_and_cycles():
    links = [(A, B, 1.0), (B, C, 1.0), (C, A, 1.0)]  # a loop: nothing is reached twice on one path
    support = context_support({A: 0.8, B: 0.2}, links, max_hops=2)
    assert set(support) == {A, B}  # C was fetched as a link's end but not scored: it neither lends nor gets
    assert support[B] == pytest.approx((0.8, A)) and support[A] == pytest.approx((0.2, B))
    assert context_support({A: 0.8}, [], max_hops=2) == {}


def test_a_superseded_hit_lends_activation_to_its_successor_alone():
    """A silent memory (superseded) spreads to no neighbour but the ones it names (its successors), neither from
    itself nor through itself, and lends no hit its waypoint weight."""
    E = uuid.UUID(int=5)
    hits = {A: Candidate(A), B: Candidate(B)}
    links = [(A, C, 0.9), (A, B, 0.8), (A, D, 0.9), (D, E, 1.0)]
    reached = spread_activation(hits, links, max_hops=2, decay_per_hop=0.5, silent={A: {D}})
    # C and B are not its successors; E is the successor's neighbour, and the successor passes on what it was lent
    assert set(reached) == {D, E} and reached[E].via == D
    assert hits[B].activation == 0.0 and hits[B].waypoint_weight == 0.0
    assert reached[D].via == A and reached[D].activation == pytest.approx(0.45)
