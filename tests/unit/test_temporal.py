"""The period a query names, for time anchoring."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shared.temporal import Period, query_period


@pytest.mark.parametrize(
    ("query", "years", "months"),
    [
        ("What did Melanie paint in May 2023?", {2023}, {5}),
        ("What happened in March and April of 2022?", {2022}, {3, 4}),
        ("Where did they go in june?", set(), {6}),  # lower case is fine for an unambiguous month
        ("Sept 2021 trip", {2021}, {9}),
        ("What did Caroline do in 2022", {2022}, set()),
        ("When did Caroline go to the support group?", set(), set()),
    ],
)
def test_a_query_names_years_and_months(query, years, months):
    assert query_period(query) == Period(frozenset(years), frozenset(months))


@pytest.mark.parametrize(
    "query",
    [
        "May I ask what she painted?",  # first word: the verb
        "Did they say she may come?",  # lower case: the verb
        "Why did the protesters march?",
        "We shipped 2,023 boxes",  # a number, not a year
        "release 2023.5 notes",
        "music of the 1990s",  # a decade is not read as its first year
        "order 120230",
    ],
)
def test_words_and_numbers_that_only_look_like_dates_name_no_period(query):
    assert not query_period(query)


def test_a_period_contains_the_moments_in_its_years_and_months():
    may_2023 = Period(frozenset({2023}), frozenset({5}))
    assert may_2023.contains(datetime(2023, 5, 31, 23, 59, tzinfo=UTC))
    assert not may_2023.contains(datetime(2023, 6, 1, tzinfo=UTC))
    assert not may_2023.contains(datetime(2022, 5, 8, tzinfo=UTC))
    any_may = Period(months=frozenset({5}))
    assert any_may.contains(datetime(2022, 5, 8, tzinfo=UTC)) and any_may.contains(datetime(2031, 5, 1, tzinfo=UTC))
    whole_year = Period(years=frozenset({2022}))
    assert whole_year.contains(datetime(2022, 12, 31, tzinfo=UTC)) and not whole_year.contains(datetime(2023, 1, 1))
    assert not Period().contains(datetime(2023, 5, 8, tzinfo=UTC))  # naming nothing matches nothing
