"""The read path's pure stages: fusion, one-hop expansion, composite scoring."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from shared.retrieval import (
    Candidate,
    context_support,
    fuse,
    lexical_strength,
    relevance,
    resolve_conflicts,
    score_candidate,
    spread_activation,
)
from shared.scoring import ScoreWeights

A, B, C, D = (uuid.UUID(int=i) for i in range(1, 5))
NOW = datetime(2026, 11, 22, tzinfo=UTC)


def test_fuse_sums_reciprocal_ranks_and_keeps_both_traces():
    fused = fuse([(A, 3.0), (B, 1.0)], [(B, 0.9), (C, 0.8)], rrf_k=60, limit=10)
    assert fused[B].rrf_score == pytest.approx(1 / 62 + 1 / 61)
    assert fused[A].rrf_score == pytest.approx(1 / 61)
    assert fused[C].rrf_score == pytest.approx(1 / 62)
    assert (fused[B].lexical_rank, fused[B].dense_rank) == (2, 1)
    assert fused[A].dense_rank is None and fused[C].lexical_rank is None
    assert next(iter(fused)) == B  # consensus beats a single first place


def test_fuse_is_graceful_when_one_ranker_is_empty_and_respects_limit():
    only_dense = fuse([], [(A, 0.9), (B, 0.5), (C, 0.1)], rrf_k=60, limit=2)
    assert list(only_dense) == [A, B]
    assert fuse([], [], rrf_k=60, limit=5) == {}


def test_expand_one_hop_follows_links_both_ways_and_max_wins():
    seeds = {A: Candidate(A), B: Candidate(B)}
    links = [(A, C, 0.4), (D, B, 0.8), (B, C, 0.9), (A, B, 0.7)]
    expanded = spread_activation(seeds, links, max_hops=1, decay_per_hop=0.5)
    assert set(expanded) == {C, D}
    assert expanded[C].via == B and expanded[C].waypoint_weight == pytest.approx(0.9)
    assert expanded[D].via == B and expanded[D].hops == 1  # reached against the link's direction
    assert seeds[B].waypoint_weight == pytest.approx(0.7)  # a seed linked to a seed records the weight
    assert expanded[C].path == [str(B), str(C)]


def score(candidate, *, cosine=0.8, max_lexical=2.0, salience=0.5, seen_days_ago=0.0, alpha=0.5, **extra):
    return score_candidate(
        candidate,
        cosine=cosine,
        max_lexical=max_lexical,
        salience=salience,
        last_seen_at=NOW - timedelta(days=seen_days_ago),
        now=NOW,
        weights=ScoreWeights(),
        fusion_alpha=alpha,
        hop_decay=0.5,
        recency_decay_per_day=0.05,
        **extra,
    )


def test_composite_score_matches_the_seed_formula():
    direct = Candidate(A, lexical_score=1.0)
    value = score(direct, cosine=0.8, max_lexical=2.0, salience=0.5, seen_days_ago=10)
    similarity = 0.5 * 0.8 + 0.5 * 0.5
    expected = 0.6 * similarity + 0.2 * 0.5 + 0.1 * math.exp(-0.05 * 10) + 0.1 * 0.0
    assert value == pytest.approx(expected)
    assert direct.components["similarity"] == pytest.approx(similarity, abs=1e-6)
    assert direct.components["recency"] == pytest.approx(math.exp(-0.5), abs=1e-6)


def test_linked_memory_is_discounted_per_hop_and_earns_the_waypoint_term():
    hop = Candidate(B, hops=1, via=A, waypoint_weight=0.9)
    value = score(hop, cosine=0.6, salience=0.4)
    similarity = 0.5 * (0.5 * 0.6 + 0.5 * 0.0)
    assert value == pytest.approx(0.6 * similarity + 0.2 * 0.4 + 0.1 * 1.0 + 0.1 * 0.9)


def test_negative_cosine_never_lowers_similarity_below_zero():
    c = Candidate(A)
    score(c, cosine=-0.4, max_lexical=0.0, alpha=1.0)
    assert c.components["similarity"] == 0.0


def test_a_memory_with_no_vector_to_compare_is_judged_by_its_words_alone():
    fingerprint, measured = Candidate(A, lexical_score=2.0), Candidate(B, lexical_score=2.0)
    score(fingerprint, cosine=None, max_lexical=2.0, alpha=0.7)
    score(measured, cosine=0.0, max_lexical=2.0, alpha=0.7)
    assert fingerprint.components["similarity"] == pytest.approx(1.0)  # not 0.3: no cosine is not a cosine of 0
    assert measured.components["similarity"] == pytest.approx(0.3)
    assert fingerprint.components["cosine"] == 0.0 and fingerprint.similarity == 0.0


def test_status_and_confidence_scale_the_composite():
    base = score(Candidate(A), cosine=0.8, salience=0.5)
    superseded = Candidate(B)
    assert score(superseded, cosine=0.8, salience=0.5, status="superseded") == pytest.approx(base * 0.5)
    assert superseded.components["status_penalty"] == 0.5
    contradicted = score(Candidate(C), cosine=0.8, salience=0.5, status="contradicted")
    assert contradicted == pytest.approx(base * 0.3)
    doubtful = Candidate(D)
    value = score(doubtful, cosine=0.8, salience=0.5, confidence=0.5, confidence_weight=0.1)
    assert value == pytest.approx(base * 0.95) and doubtful.components["confidence"] == pytest.approx(0.95)


def test_the_weaker_side_of_a_contradiction_is_demoted_once():
    candidates = {i: Candidate(i, score=0.8) for i in (A, B, C)}
    demoted = resolve_conflicts(candidates, [(A, B), (B, A), (C, D)], {A: 0.9, B: 0.4, C: 0.5})
    assert demoted == [(B, A)]  # D is not a candidate: nothing to resolve against it
    assert candidates[B].score == pytest.approx(0.8 * 0.3) and candidates[B].components["conflict_penalty"] == 0.3
    assert candidates[A].score == 0.8 and candidates[C].score == 0.8


def test_activation_spreads_two_hops_both_ways_and_the_strongest_path_wins():
    E = uuid.UUID(int=5)
    seeds = {A: Candidate(A)}
    links = [(A, B, 0.9), (C, B, 0.8), (A, D, 0.2), (D, C, 0.9), (E, C, 1.0)]  # E is three hops away
    reached = spread_activation(seeds, links, max_hops=2, decay_per_hop=0.5)
    assert set(reached) == {B, C, D}
    # C: A-B-C (0.9 * 0.8 = 0.72) beats A-D-C (0.2 * 0.9 = 0.18); reached against B->C's direction
    assert (reached[C].hops, reached[C].via, reached[C].trail) == (2, B, (A, B))
    assert reached[C].waypoint_weight == pytest.approx(0.72)
    assert reached[C].path == [str(A), str(B), str(C)] and reached[C].traversed == [(A, B), (B, C)]
    assert reached[D].hops == 1  # one weak hop still beats its own two-hop detour
    assert set(spread_activation(seeds, links, max_hops=1, decay_per_hop=0.5)) == {B, D}


def test_a_strong_two_hop_path_can_beat_a_weak_direct_link():
    seeds = {A: Candidate(A)}
    reached = spread_activation(seeds, [(A, C, 0.1), (A, B, 1.0), (B, C, 1.0)], max_hops=2, decay_per_hop=0.5)
    assert reached[C].hops == 2  # 1.0 * 1.0 * 0.25 > 0.1 * 0.5: max wins


def test_each_seed_spreads_its_own_relevance_and_the_strongest_arrival_wins():
    seeds = {A: Candidate(A), B: Candidate(B)}
    links = [(A, C, 1.0), (B, C, 1.0), (B, D, 0.5)]
    reached = spread_activation(seeds, links, max_hops=1, decay_per_hop=0.5, energy={A: 0.3, B: 0.8})
    assert reached[C].via == B and reached[C].activation == pytest.approx(0.8 * 1.0 * 0.5)
    assert reached[D].activation == pytest.approx(0.8 * 0.5 * 0.5)
    assert reached[C].waypoint_weight == pytest.approx(1.0)  # the links walked, not the energy
    # without energies every seed counts as fully relevant
    plain = spread_activation(seeds, links, max_hops=1, decay_per_hop=0.5)
    assert plain[C].activation == pytest.approx(0.5)
    # a seed linked to a seed earns the link weight times the other seed's relevance
    linked = {A: Candidate(A), B: Candidate(B)}
    spread_activation(linked, [(A, B, 0.9)], max_hops=1, decay_per_hop=0.5, energy={A: 0.5, B: 0.2})
    assert linked[B].waypoint_weight == pytest.approx(0.9 * 0.5) and linked[A].waypoint_weight == pytest.approx(
        0.9 * 0.2
    )


def test_a_weak_direct_hit_next_to_a_strong_one_ranks_as_if_the_strong_one_reached_it():
    # A: the question that matches; B: the answer after it, a weak hit of its own; C: a non-hit after B's place.
    seeds = {A: Candidate(A), B: Candidate(B)}
    reached = spread_activation(
        seeds, [(A, B, 1.0), (A, C, 1.0)], max_hops=1, decay_per_hop=0.5, energy={A: 0.8, B: 0.1}
    )
    assert reached[C].activation == pytest.approx(0.4)
    assert seeds[B].activation == pytest.approx(0.8 * 1.0 * 0.5) and seeds[B].via == A
    assert seeds[A].activation == pytest.approx(0.1 * 0.5)  # lent in both directions; max wins below
    assert seeds[B].hops == 0 and seeds[B].path == [str(B)]  # still a direct hit, walked nowhere
    score(seeds[B], cosine=0.1, max_lexical=2.0)
    score(reached[C], cosine=0.1, max_lexical=2.0)
    assert seeds[B].components["similarity"] == pytest.approx(0.4) == reached[C].components["similarity"]
    assert seeds[B].components["activation"] == pytest.approx(0.4)
    score(seeds[A], cosine=0.9, max_lexical=2.0)
    assert seeds[A].components["similarity"] == pytest.approx(0.5 * 0.9)  # its own match is the larger


def test_a_linked_memory_scores_by_the_larger_of_its_own_match_and_its_activation():
    reply = Candidate(B, hops=1, via=A, waypoint_weight=1.0, activation=0.4)  # says nothing the query says
    score(reply, cosine=0.1, max_lexical=2.0)
    assert reply.components["similarity"] == pytest.approx(0.4)
    assert reply.components["activation"] == pytest.approx(0.4)
    echo = Candidate(C, hops=1, via=A, waypoint_weight=1.0, activation=0.05)  # matches well on its own
    score(echo, cosine=0.9, max_lexical=2.0)
    assert echo.components["similarity"] == pytest.approx(0.5 * (0.5 * 0.9))


def test_activation_weight_scales_what_a_link_lends_but_not_the_memory_s_own_match():
    reply = Candidate(B, hops=1, via=A, waypoint_weight=1.0, activation=0.4)
    score(reply, cosine=0.1, max_lexical=2.0, activation_weight=0.5)
    assert reply.components["similarity"] == pytest.approx(0.2)  # half of the activation; its own match is 0.025
    assert reply.components["activation"] == pytest.approx(0.4)  # the trace shows what was spread
    echo = Candidate(C, hops=1, via=A, waypoint_weight=1.0, activation=0.05)
    score(echo, cosine=0.9, max_lexical=2.0, activation_weight=0.5)
    assert echo.components["similarity"] == pytest.approx(0.5 * (0.5 * 0.9))


def test_lexical_power_takes_credit_from_partial_word_matches_and_keeps_the_best_match_whole():
    best, partial = Candidate(A, lexical_score=2.0), Candidate(B, lexical_score=1.0)
    assert lexical_strength(best, 2.0, 2.0) == 1.0
    assert lexical_strength(partial, 2.0, 1.0) == pytest.approx(0.5)
    assert lexical_strength(partial, 2.0, 2.0) == pytest.approx(0.25)
    assert lexical_strength(Candidate(C), 2.0, 2.0) == 0.0  # no lexical hit
    score(partial, cosine=0.6, max_lexical=2.0, lexical_power=2.0)
    assert partial.components["lexical"] == pytest.approx(0.25)
    assert partial.components["similarity"] == pytest.approx(0.5 * 0.6 + 0.5 * 0.25)
    assert relevance(partial, cosine=0.6, max_lexical=2.0, fusion_alpha=0.5, lexical_power=2.0) == pytest.approx(
        0.5 * 0.6 + 0.5 * 0.25
    )


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


def test_context_support_is_added_to_the_similarity_and_shown_in_the_trace():
    plain, amid = Candidate(A), Candidate(B, support=0.8, support_from=A)
    score(plain, cosine=0.6, max_lexical=0.0, alpha=1.0, context_weight=0.4)
    score(amid, cosine=0.6, max_lexical=0.0, alpha=1.0, context_weight=0.4)
    assert plain.components["similarity"] == pytest.approx(0.6) and "context" not in plain.components
    assert amid.components["similarity"] == pytest.approx(0.6 + 0.4 * 0.8)
    assert amid.components["context"] == pytest.approx(0.32)
    assert amid.score - plain.score == pytest.approx(0.6 * 0.32)
    off = Candidate(C, support=0.8, support_from=A)
    score(off, cosine=0.6, max_lexical=0.0, alpha=1.0, context_weight=0.0)
    assert off.score == pytest.approx(plain.score) and "context" not in off.components


def test_a_query_outcome_is_injected_blind_or_without_memories() -> None:
    from shared.retrieval_stats import outcome

    assert outcome(matches=3, candidates=12) == "injected"
    assert outcome(matches=0, candidates=12) == "blind"  # memories were there; the gate let none through
    assert outcome(matches=0, candidates=0) == "no_memories"


def test_a_memory_from_the_period_the_query_names_gains_the_period_weight():
    then, other = Candidate(A, in_period=True), Candidate(B)
    score(then, cosine=0.5, max_lexical=0.0, alpha=1.0, period_weight=0.2)
    score(other, cosine=0.5, max_lexical=0.0, alpha=1.0, period_weight=0.2)
    assert then.components["similarity"] == pytest.approx(0.7) and then.components["period"] == pytest.approx(0.2)
    assert other.components["similarity"] == pytest.approx(0.5) and "period" not in other.components
    off = Candidate(C, in_period=True)
    score(off, cosine=0.5, max_lexical=0.0, alpha=1.0, period_weight=0.0)
    assert off.score == pytest.approx(other.score)
