"""Versions of a fact on the read path: the questions about the past, and the order of a version pair."""

from __future__ import annotations

import uuid

import pytest

from shared.retrieval.versions import answering_order, answers_note, asks_about_the_past, superseded_note


@pytest.mark.parametrize(
    "question",
    [
        "Where did Alice live before?",
        "Where did Alice live before ?",
        "What was her old job?",
        "Which was his previous car?",
        "Where did she used to work?",
        "Where did she use to live?",
        "Did Bob use to smoke?",
        "What coffee did I order previously?",
        "Where did they live before she moved?",
        "What was my rent before the move?",
        "Which bank did I use before that?",
        "Who was my former employer?",
        "What was my phone originally?",
        "What does Alice no longer drink?",
        "What did we pay in the past?",
        "What activity did Caroline used to do with her dad?",
    ],
)
def test_a_question_about_what_a_fact_was_asks_about_the_past(question):
    assert asks_about_the_past(question)


@pytest.mark.parametrize(
    "question",
    [
        "Which city do I live in?",  # the updates-dev questions ask for the current value
        "What is my job?",
        "What do I use to track my sleep?",
        "What did he use to drive the nail in?",  # an instrument, not a habit
        "What ingredient did Nate use to make the ice cream lactose-free?",
        "Is she used to the cold?",  # accustomed
        "What was the knife used to cut?",  # employed
        "What's she used to?",
        "Has Melanie been camping before?",  # experience, not an earlier version
        "Have you ever tried sushi before?",
        "What did Alice eat before the race?",
        "When did she call before leaving?",
        "How old is her dog?",
        "Who is her old friend?",  # "old" before a noun of things that do not change
        "What did Caroline do in the previous week?",
        "Where are we going in August?",
    ],
)
def test_an_ordinary_question_does_not(question):
    assert not asks_about_the_past(question)


def test_the_newer_version_takes_the_higher_place_and_the_older_comes_right_after():
    order, took = answering_order(["old", "x", "new", "y"], [("new", "old")])
    assert order == ["new", "old", "x", "y"] and took == {"new": "old"}
    order, took = answering_order(["new", "x", "old"], [("new", "old")])  # already in answering order: kept
    assert order == ["new", "x", "old"] and took == {}


def test_a_question_about_the_past_swaps_the_roles():
    order, took = answering_order(["new", "x", "old"], [("new", "old")], past=True)
    assert order == ["old", "new", "x"] and took == {"old": "new"}


def test_a_chain_settles_and_a_pair_with_an_end_not_ranked_or_a_cycle_changes_nothing_else():
    order, _ = answering_order(["a", "b", "c", "x"], [("b", "a"), ("c", "b")])  # c replaces b replaces a
    assert order == ["c", "b", "a", "x"]
    assert answering_order(["a", "x"], [("gone", "a")])[0] == ["a", "x"]
    order, _ = answering_order(["a", "b", "x"], [("a", "b"), ("b", "a")])  # a cycle of links stops
    assert sorted(order) == ["a", "b", "x"] and order[-1] == "x"


def test_the_trace_lines_name_the_versions():
    newer, older = uuid.UUID(int=2), uuid.UUID(int=1)
    assert superseded_note([newer], "2026-03-01") == f"superseded by {newer} on 2026-03-01"
    assert superseded_note([], None) == "superseded by a newer memory"
    assert answers_note([older]).startswith(f"answers for {older}")
