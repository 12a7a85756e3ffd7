"""Recency, the composite score and its components, relevance, conflicts, cosine similarity."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shared.retrieval.fusion import Candidate, rrf_fuse
from shared.retrieval.scoring import (
    ScoreComponents,
    ScoreWeights,
    composite_score,
    cosine_similarity,
    lexical_strength,
    recency_score,
    relevance,
    resolve_conflicts,
)
from tests.unit.retrieval.helpers import A, B, C, D, score


def test_rrf_sums_reciprocal_ranks_across_lists():
    fused = rrf_fuse([["a", "b", "c"], ["c", "d"]])
    assert fused == pytest.approx({"a": 1 / 61, "b": 1 / 62, "c": 1 / 63 + 1 / 61, "d": 1 / 62})
    assert max(fused, key=fused.__getitem__) == "c"


def test_rrf_with_custom_k():
    assert rrf_fuse([[7, 8], [8]], k=0) == pytest.approx({7: 1.0, 8: 1 / 2 + 1 / 1})


def test_rrf_tolerates_missing_rankers():
    assert rrf_fuse([]) == {}
    assert rrf_fuse([[], []]) == {}
    assert rrf_fuse([[], ["x"]]) == pytest.approx({"x": 1 / 61})


def test_rrf_counts_an_id_once_per_list_at_its_best_rank():
    assert rrf_fuse([["a", "b", "a"]]) == pytest.approx({"a": 1 / 61, "b": 1 / 62})


def test_rrf_refuses_negative_k():
    with pytest.raises(ValueError, match="non-negative"):
        rrf_fuse([["a"]], k=-1)


def test_recency_score():
    assert recency_score(0) == 1.0
    assert recency_score(10) == pytest.approx(math.exp(-0.5))
    assert recency_score(30) == pytest.approx(0.2231, abs=1e-4)
    assert recency_score(-5) == 1.0
    assert recency_score(2, decay_per_day=0.5) == pytest.approx(math.exp(-1))


def test_composite_score_is_openmemorys_weighted_sum():
    weights = ScoreWeights()
    assert (weights.similarity, weights.salience, weights.recency, weights.waypoint) == (0.6, 0.2, 0.1, 0.1)
    components = ScoreComponents(similarity=1.0, salience=0.5, recency=0.2, waypoint=0.0)
    assert composite_score(components, weights) == pytest.approx(0.6 + 0.1 + 0.02)
    only_waypoint = ScoreWeights(similarity=0, salience=0, recency=0, waypoint=1)
    assert composite_score(ScoreComponents(0.9, 0.9, 0.9, 0.3), only_waypoint) == pytest.approx(0.3)


def test_cosine_similarity():
    assert cosine_similarity([1, 0], [0, 1]) == 0.0
    assert cosine_similarity([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert cosine_similarity([1, 0], [-3, 0]) == pytest.approx(-1.0)
    assert cosine_similarity([1, 0], [1, 1]) == pytest.approx(1 / math.sqrt(2))
    assert cosine_similarity(np.array([3.0, 4.0], dtype=np.float32), [4.0, 3.0]) == pytest.approx(24 / 25)


def test_cosine_similarity_of_a_zero_vector_is_zero():
    assert cosine_similarity([0, 0], [1, 1]) == 0.0
    assert cosine_similarity(np.zeros(3), np.zeros(3)) == 0.0


def test_recency_weight_interpolates_recalls_weights() -> None:
    from shared.retrieval.scoring import recency_interpolated

    relevance_first, fresh_first = recency_interpolated(0.0), recency_interpolated(1.0)
    assert (relevance_first.similarity, relevance_first.recency, relevance_first.salience) == (0.70, 0.0, 0.20)
    assert (fresh_first.similarity, fresh_first.recency, fresh_first.salience) == pytest.approx((0.40, 0.40, 0.10))
    for r in (0.0, 0.3, 0.7, 1.0):
        w = recency_interpolated(r)
        assert w.similarity + w.salience + w.recency + w.waypoint == pytest.approx(1.0)
    assert recency_interpolated(3.0) == fresh_first  # clamped


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


def test_a_memory_from_the_period_the_query_names_gains_the_period_weight():
    then, other = Candidate(A, in_period=True), Candidate(B)
    score(then, cosine=0.5, max_lexical=0.0, alpha=1.0, period_weight=0.2)
    score(other, cosine=0.5, max_lexical=0.0, alpha=1.0, period_weight=0.2)
    assert then.components["similarity"] == pytest.approx(0.7) and then.components["period"] == pytest.approx(0.2)
    assert other.components["similarity"] == pytest.approx(0.5) and "period" not in other.components
    off = Candidate(C, in_period=True)
    score(off, cosine=0.5, max_lexical=0.0, alpha=1.0, period_weight=0.0)
    assert off.score == pytest.approx(other.score)


def test_a_memory_returned_a_hundred_times_gains_salience_but_not_the_rank_of_a_clearly_better_match():
    from shared.lifecycle.formulas import returned

    salience, lift = 0.4, 0.0  # a new memory's, never recalled
    for _ in range(100):
        salience, lift = returned(salience, lift, boost=0.5)
    assert salience == 1.0 and lift == pytest.approx(0.6)  # the seeds' reinforcement: decay and tiers see 1.0
    recalled, better = Candidate(A), Candidate(B)
    # cosines 0.50 against 0.56 with no shared words: relevance 0.25 against 0.28 at alpha 0.5
    score(recalled, cosine=0.50, max_lexical=0.0, salience=salience, recall_lift=lift)
    score(better, cosine=0.56, max_lexical=0.0, salience=0.4)
    assert better.score > recalled.score
    # and it still reorders a near-tie of relevance
    near = Candidate(C)
    score(near, cosine=0.51, max_lexical=0.0, salience=0.4)
    assert recalled.score > near.score
    assert recalled.components["salience"] == pytest.approx(0.46) and recalled.components["recall_lift"] == 0.6


def test_with_the_whole_lift_counting_the_recalled_memory_outranks_the_better_match_as_in_openmemory():
    recalled, better = Candidate(A), Candidate(B)
    score(recalled, cosine=0.50, max_lexical=0.0, salience=1.0, recall_lift=0.6, recall_share=1.0)
    score(better, cosine=0.56, max_lexical=0.0, salience=0.4, recall_share=1.0)
    assert recalled.score > better.score  # what the share bounds


def test_salience_the_writer_gave_or_a_client_confirmed_counts_in_full():
    from shared.lifecycle.formulas import confirmed, returned

    salience, lift = returned(0.4, 0.0, boost=0.5)
    salience, lift = confirmed(salience, lift, boost=0.2)  # POST /memory/reinforce: "I used this"
    assert (salience, lift) == (pytest.approx(1.0), pytest.approx(0.3))
    important, plain = Candidate(A), Candidate(B)
    score(important, cosine=0.5, max_lexical=0.0, salience=0.9)
    score(plain, cosine=0.5, max_lexical=0.0, salience=0.4)
    assert important.score - plain.score == pytest.approx(0.2 * 0.5)
    confirmed_once = Candidate(C)
    score(confirmed_once, cosine=0.5, max_lexical=0.0, salience=1.0, recall_lift=0.3)
    assert confirmed_once.components["salience"] == pytest.approx(0.73)  # 1.0 - 0.9 x 0.3
    odd = Candidate(D)
    score(odd, cosine=0.5, max_lexical=0.0, salience=0.2, recall_lift=0.5)
    assert odd.components["salience"] == pytest.approx(0.02)  # a lift is never more than the salience


def test_the_gate_reads_relevance_which_salience_and_recency_do_not_move():
    stale, fresh = Candidate(A), Candidate(B)
    score(stale, cosine=0.4, max_lexical=0.0, salience=0.0, seen_days_ago=400)
    score(fresh, cosine=0.4, max_lexical=0.0, salience=1.0)
    assert stale.relevance == fresh.relevance == pytest.approx(0.2)
    assert stale.score < fresh.score


def test_salience_is_read_as_decayed_to_the_query_s_time_whether_or_not_the_cycle_reached_the_memory():
    from shared.lifecycle.formulas import Aging, TierRules, decay_factor

    aging = Aging(TierRules(), sector_scaling=False)
    # a month unseen at the birth salience 0.4: cold (not recent, not above 0.4), λ 0.05
    assert aging.factor(0.4, 0, None, 30.0) == pytest.approx(decay_factor(0.05, 30.0, 0.4))
    assert aging.factor(0.4, 0, None, 0.0) == 1.0  # seen now: nothing to decay
    reached, not_reached = Candidate(A), Candidate(B)
    # the cycle reached one memory on day 25 (0.4 -> 0.033); the other still has its 0.4 from birth
    score(
        reached,
        cosine=0.5,
        max_lexical=0.0,
        salience=0.4 * decay_factor(0.05, 25.0, 0.4),
        seen_days_ago=30,
        aging=aging,
    )
    score(not_reached, cosine=0.5, max_lexical=0.0, salience=0.4, seen_days_ago=30, aging=aging)
    assert abs(reached.score - not_reached.score) < 0.01  # without aging: 0.2 x (0.4 - 0.033) = 0.073 apart
    assert not_reached.components["aging"] == pytest.approx(decay_factor(0.05, 30.0, 0.4), abs=1e-6)
    used = Candidate(C)  # seen two days ago and salient: hot, and hardly decayed
    score(used, cosine=0.5, max_lexical=0.0, salience=0.9, seen_days_ago=2, aging=aging)
    assert used.components["salience"] == pytest.approx(0.9 * decay_factor(0.005, 2.0, 0.9), abs=1e-6)


def test_settings_give_scoring_the_lifecycle_s_tier_rules():
    from shared.config import Settings

    settings = Settings(_env_file=None, tier_cold_lambda=0.1, decay_sector_scaling=False)
    assert settings.scoring.aging is not None
    assert settings.scoring.aging.tiers.cold_lambda == 0.1 and not settings.scoring.aging.sector_scaling


def test_in_an_old_store_what_queries_returned_yesterday_does_not_outrank_a_better_match():
    from shared.lifecycle.formulas import Aging, TierRules, returned

    aging = Aging(TierRules(), sector_scaling=False)
    # both stored 30 days ago; one was returned by a query yesterday (seen again, salience raised, not decayed)
    salience, lift = returned(0.4, 0.0, boost=0.5)
    echo = dict(cosine=0.50, max_lexical=0.0, salience=salience, recall_lift=lift, seen_days_ago=1, used_days_ago=30)
    echoed, better = Candidate(A), Candidate(B)
    score(echoed, **echo, aging=aging)
    # the echo is bounded: at most a tenth of salience 1 and of recency 1 over the unreturned memory's (0.028 of
    # composite, 0.047 of relevance); a match better by 0.05 of relevance wins
    score(better, cosine=0.60, max_lexical=0.0, salience=0.4, seen_days_ago=30, aging=aging)
    assert better.score > echoed.score
    # as OpenMemory ranks it (the whole echo counts), the memory returned yesterday wins by far
    as_openmemory = Candidate(C)
    score(as_openmemory, **echo, aging=aging, recall_share=1.0)
    assert as_openmemory.score - better.score > 0.1
    # a client that used it yesterday (POST /memory/reinforce) makes it recent and salient in full
    used = Candidate(D)
    score(used, cosine=0.50, max_lexical=0.0, salience=0.6, seen_days_ago=1, used_days_ago=1, aging=aging)
    assert used.score > better.score


def test_the_trace_is_built_when_first_read_from_what_scoring_measured_and_keeps_later_additions():
    scored = Candidate(A, hops=1, via=B, waypoint_weight=0.5, activation=0.3)
    value = score(scored, cosine=0.6, salience=0.5, status="superseded")
    assert scored._trace is not None  # nothing built yet: most scored candidates are never returned
    scored.activation = 0.9  # a later change of the candidate does not rewrite what scoring measured
    scored.components["redundancy"] = 0.25  # as MMR adds to it: the trace is built first, then added to
    assert scored._trace is None and scored.score == value
    assert scored.components["activation"] == pytest.approx(0.3)
    assert scored.components["status_penalty"] == 0.5 and scored.components["redundancy"] == 0.25
    assert set(scored.components) >= {"similarity", "cosine", "lexical", "salience", "recency", "waypoint"}
    score(scored, cosine=0.2, salience=0.5)  # scored again: the new trace replaces the old one whole
    assert "redundancy" not in scored.components and "status_penalty" not in scored.components
