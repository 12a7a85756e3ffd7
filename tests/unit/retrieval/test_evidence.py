"""The evidence gate's arithmetic: raw cosine above a floor, IDF-weighted coverage, the names a store never saw."""

from __future__ import annotations

import math
import uuid

import pytest

from shared.retrieval.evidence import GateParams, coverage, evidence, idf, names_in, query_terms
from shared.retrieval.fusion import Candidate
from shared.retrieval.select import weigh_evidence

PARAMS = GateParams(min_evidence=0.2, cosine_floor=0.2, cosine_weight=0.7, coverage_weight=0.3, unknown_name_weight=0.3)


def test_names_are_capitalised_words_that_do_not_start_a_sentence():
    assert names_in("What does Zorblax drink?") == ["Zorblax"]
    assert names_in("When did Caroline go to the LGBTQ support group?") == ["Caroline"]  # an acronym is no name
    assert names_in("Ethanol stress increases PSP in BlaER1 and Rpl23 cells of Leviviridae.") == ["Leviviridae"]
    assert names_in("Caroline moved. Where did Melanie go?") == ["Melanie"]  # each sentence's first word is grammar
    assert names_in("what does zorblax drink?") == []  # names need capitals
    assert names_in("Did I tell Bob, and Bob's sister, about it?") == ["Bob", "Bob's"]
    assert names_in("") == []
    assert names_in("What did Caroline do in November, on a Friday?") == ["Caroline"]  # times are in the date
    assert names_in("Did Jon meet Dr. K at the Four Seasons?") == ["Jon", "Dr", "Four", "Seasons"]


def test_idf_is_lucenes_and_positive_on_a_tiny_store():
    assert idf(0, 10) == pytest.approx(math.log(1 + 10.5 / 0.5))
    assert idf(10, 10) > 0
    assert idf(1, 10) > idf(5, 10)
    assert idf(3, 0) > 0  # an empty store has one document's worth of statistics


def test_coverage_weighs_rare_terms_more_than_common_ones():
    terms = query_terms({"orchid": 1, "window": 40}, documents=100)
    rare, common = coverage(terms, {"orchid"}), coverage(terms, {"window"})
    assert rare > 0.5 > common > 0
    assert coverage(terms, {"orchid", "window", "other"}) == pytest.approx(1.0)
    assert coverage(terms, set()) == 0.0
    assert coverage(query_terms({}, documents=100), {"orchid"}) == 0.0  # a query of stop words covers nothing


def test_a_name_is_unknown_when_no_memory_has_any_of_its_lexemes():
    terms = query_terms(
        {"zorblax": 0, "drink": 3}, documents=50, names={"Zorblax": {"zorblax": 0}, "Alice": {"alic": 4}, "The": {}}
    )
    assert terms.unknown_names == ("Zorblax",)
    assert terms.unknown_share == 0.5  # "The" has no lexeme: a stop word, no name
    assert query_terms({"drink": 3}, documents=50).unknown_share == 0.0


def test_evidence_counts_cosine_only_above_the_floor():
    assert evidence(0.2, 0.0, 0.0, PARAMS) == 0.0
    assert evidence(0.1, 0.0, 0.0, PARAMS) == 0.0  # below the floor is no evidence, not negative
    assert evidence(0.6, 0.0, 0.0, PARAMS) == pytest.approx(0.7 * 0.4 / 0.8)
    assert evidence(1.0, 1.0, 0.0, PARAMS) == pytest.approx(1.0)


def test_evidence_adds_coverage_and_subtracts_unknown_names():
    matched = evidence(0.5, 0.5, 0.0, PARAMS)
    assert matched == pytest.approx(0.7 * 0.3 / 0.8 + 0.15)
    assert evidence(0.5, 0.5, 1.0, PARAMS) == pytest.approx(matched - 0.3)
    assert evidence(0.5, 0.5, 1.0, GateParams(unknown_name_weight=0.0, cosine_floor=0.2)) == pytest.approx(matched)


def test_a_memory_without_a_vector_is_judged_by_its_words_alone():
    assert evidence(None, 0.5, 0.0, PARAMS) == pytest.approx(0.5)
    assert evidence(None, 0.0, 0.0, PARAMS) == 0.0


def test_an_off_store_question_falls_under_the_gate_and_an_in_store_one_passes():
    """The shape of the LoCoMo case: another conversation's question shares topic words, not its names."""
    shipped = GateParams()
    foreign = query_terms(
        {"carolin": 0, "lgbtq": 0, "support": 5, "group": 8},
        documents=600,
        names={"Caroline": {"carolin": 0}, "LGBTQ": {"lgbtq": 0}},
    )
    own = query_terms(
        {"carolin": 300, "lgbtq": 4, "support": 5, "group": 8},
        documents=600,
        names={"Caroline": {"carolin": 300}, "LGBTQ": {"lgbtq": 4}},
    )
    answer = {"carolin", "lgbtq", "support", "group"}
    assert (
        evidence(0.35, coverage(foreign, {"support", "group"}), foreign.unknown_share, shipped) < shipped.min_evidence
    )
    assert evidence(0.55, coverage(own, answer), own.unknown_share, shipped) >= shipped.min_evidence


def test_a_latest_version_carries_the_evidence_of_the_versions_it_answers_for():
    old, new, other = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    terms = query_terms({"citi": 0, "live": 1}, documents=6)
    rows = {old: {"query_terms": ["live", "pari"]}, new: {"query_terms": ["berlin"]}, other: {"query_terms": []}}
    cosines = {old: 0.5, new: 0.1, other: 0.1}
    answering = Candidate(new, answers_for=(old,))
    alone = Candidate(other)
    weigh_evidence({new: answering, other: alone}, rows, cosines, terms, PARAMS)
    own_old = evidence(0.5, coverage(terms, {"live", "pari"}), 0.0, PARAMS)
    assert answering.evidence == pytest.approx(own_old) and own_old > PARAMS.min_evidence
    assert alone.evidence == pytest.approx(0.0)  # under the floor, no words of the query
    inheriting = Candidate(new, inherited_from=old)  # filtered out by as_of, its match passed on still counts
    weigh_evidence({new: inheriting}, rows, cosines, terms, PARAMS)
    assert inheriting.evidence == pytest.approx(own_old)
