"""The period a query names, for time anchoring."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shared.retrieval.temporal import Period, query_period


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


NOW = datetime(2026, 3, 18, 15, 30, tzinfo=UTC)  # a Wednesday


def day(y: int, m: int, d: int, h: int = 0) -> datetime:
    return datetime(y, m, d, h, tzinfo=UTC)


@pytest.mark.parametrize(
    ("query", "inside", "outside"),
    [
        ("what did we discuss today?", [day(2026, 3, 18), day(2026, 3, 18, 23)], [day(2026, 3, 17, 23)]),
        ("What did Noa say yesterday", [day(2026, 3, 17), day(2026, 3, 17, 23)], [day(2026, 3, 18), day(2026, 3, 16)]),
        ("plans made 3 days ago", [day(2026, 3, 15, 12)], [day(2026, 3, 16), day(2026, 3, 14, 23)]),
        ("two days ago", [day(2026, 3, 16, 1)], [day(2026, 3, 17, 1)]),
        ("what happened this week", [day(2026, 3, 16), day(2026, 3, 22, 23)], [day(2026, 3, 15, 23)]),
        ("Last week's standup", [day(2026, 3, 9), day(2026, 3, 15, 23)], [day(2026, 3, 16), day(2026, 3, 8, 23)]),
        ("a week ago", [day(2026, 3, 9)], [day(2026, 3, 16)]),
        ("in the past 10 days", [day(2026, 3, 8, 16), NOW], [day(2026, 3, 8, 15)]),
        ("over the last two weeks", [day(2026, 3, 4, 16)], [day(2026, 3, 4, 15)]),
        ("what did we ship last month", [day(2026, 2, 1), day(2026, 2, 28, 23)], [day(2026, 3, 1), day(2025, 2, 10)]),
        ("this month", [day(2026, 3, 1)], [day(2026, 2, 28), day(2025, 3, 18)]),
        ("three months ago", [day(2025, 12, 24)], [day(2026, 12, 24), day(2025, 11, 30)]),
        ("our trip last year", [day(2025, 1, 1), day(2025, 12, 31)], [day(2026, 1, 1)]),
        ("in May last year", [day(2025, 5, 20)], [day(2025, 6, 1), day(2026, 5, 20)]),  # everything named holds
        ("this year", [day(2026, 1, 2)], [day(2025, 12, 31)]),
    ],
)
def test_relative_phrases_are_read_against_the_query_s_now(query, inside, outside):
    period = query_period(query, NOW)
    assert all(period.contains(moment) for moment in inside), period
    assert not any(period.contains(moment) for moment in outside), period


@pytest.mark.parametrize("query", ["the last time we talked", "last but not least", "this is the week plan", "2 days"])
def test_phrases_without_a_unit_or_a_count_name_no_relative_period(query):
    assert not query_period(query, NOW)


def test_without_the_query_s_time_relative_phrases_are_not_read():
    assert not query_period("today's plans") and query_period("today's plans", NOW)


def test_a_period_is_bounded_by_its_years_and_spans_and_a_month_alone_is_not():
    two_years = Period(years=frozenset({2022, 2023}), months=frozenset({5, 12}))
    assert two_years.bounds() == (day(2022, 5, 1), day(2024, 1, 1))
    assert Period(years=frozenset({2023})).bounds() == (day(2023, 1, 1), day(2024, 1, 1))
    assert Period(months=frozenset({5})).bounds() is None  # every May
    assert Period().bounds() is None
    yesterday = query_period("what did we say yesterday", NOW)
    assert yesterday.bounds() == (day(2026, 3, 17), day(2026, 3, 18))
    may_last_year = query_period("in May last year", NOW)
    assert may_last_year.bounds() == (day(2025, 5, 1), day(2025, 6, 1))
    # a year named outright wins over the relative phrase (which would otherwise leave nothing to match)
    assert query_period("yesterday in 2019", NOW).bounds() == (day(2019, 1, 1), day(2020, 1, 1))


def test_a_year_named_outright_wins_over_a_relative_phrase():
    from datetime import UTC, datetime

    from shared.retrieval.temporal import query_period

    now = datetime(2026, 3, 10, tzinfo=UTC)
    period = query_period("What did she say last week, as mentioned on November 6, 2023?", now)
    assert period.years == {2023} and period.months == {11} and not period.spans
    assert period.contains(datetime(2023, 11, 6, tzinfo=UTC))
    assert query_period("in May last year", now).years == {2025}  # no year named: the relative phrase counts
