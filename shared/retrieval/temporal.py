"""The period a query names ("in May 2023", "in 2022", "last June's trip", "yesterday"), for ranking memories
that occurred then higher (time anchoring). Pure: no clock, no IO; relative phrases are read against the
`now` the caller passes (the query's time).

Recognised:
- a year (1900–2099), a month by its full English name (or "Sept"), both together. A month named without a
  year means that month in any year; a year without a month, the whole year. "May" and "March" are also a
  verb: they count only capitalised and not as the query's first word ("What did she do in May?", not "May
  I ask what she did?"). Any number from 1900 to 2099 standing alone counts as a year ("room 2001" too).
- relative phrases: "today", "yesterday", "this / last week | month | year", "N days | weeks | months |
  years ago" (N a digit or a number word up to ten, or "a"), "in the past / last N days | weeks" (up to now).
  Days and weeks (from Monday) are UTC.

Everything named must hold at once: "in May last year" is May of the year before `now`. A query that names a
year outright is read without its relative phrases ("what did she say last week, on November 6, 2023?" is about
November 2023, not about the week before `now` as well, which would leave no moment in the period).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

_NAMES = "january february march april may june july august september october november december"
MONTHS = {name: number for number, name in enumerate(_NAMES.split(), start=1)}
MONTHS["sept"] = 9
_AMBIGUOUS = {"may", "march"}  # also verbs
_YEAR = re.compile(r"(?<![\d.,])(19\d\d|20\d\d)(?!\d|[.,]\d|s\b)")  # not 2,023 / 2023.5 / 1990s
_WORD = re.compile(r"[A-Za-z]+")
_COUNTS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5}
_COUNTS |= {"six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}
_COUNT = r"(\d{1,3}|" + "|".join(_COUNTS) + ")"
_UNIT = r"(day|week|month|year)s?"
_RELATIVE = re.compile(
    r"\b(?:(today)|(yesterday)|(this|last)\s+(week|month|year)|"
    rf"{_COUNT}\s+{_UNIT}\s+ago|(?:in\s+)?(?:the\s+)?(?:past|last)\s+{_COUNT}\s+(day|week)s?)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Period:
    """What a query names: years, months and spans of time ([start, end), UTC). A memory occurred in it if
    its year is one of `years`, its month one of `months` and it falls in one of `spans` — each only when
    the query named any."""

    years: frozenset[int] = frozenset()
    months: frozenset[int] = frozenset()
    spans: tuple[tuple[datetime, datetime], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.years or self.months or self.spans)

    def bounds(self) -> tuple[datetime, datetime] | None:
        """The smallest [start, end) range (UTC) holding every moment the period contains; None when it is
        unbounded (months named without a year or a relative phrase: that month of every year)."""
        ranges = []
        if self.years:
            first, last = min(self.years), max(self.years)
            low, high = (min(self.months), max(self.months)) if self.months else (1, 12)
            ranges.append((datetime(first, low, 1, tzinfo=UTC), _month_after(last, high)))
        if self.spans:
            ranges.append((min(start for start, _ in self.spans), max(end for _, end in self.spans)))
        if not ranges:
            return None
        start, end = max(r[0] for r in ranges), min(r[1] for r in ranges)
        return (start, end) if start < end else (start, start)

    def contains(self, moment: datetime) -> bool:
        if not self:
            return False
        return (
            (not self.years or moment.year in self.years)
            and (not self.months or moment.month in self.months)
            and (not self.spans or any(start <= moment < end for start, end in self.spans))
        )


def _month_after(year: int, month: int) -> datetime:
    return datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)


def query_period(query: str, now: datetime | None = None) -> Period:
    """The years, months and (given `now`) relative spans a query names; an empty Period when it names none."""
    years = {int(match) for match in _YEAR.findall(query)}
    months = set()
    for position, match in enumerate(_WORD.finditer(query)):
        word = match.group()
        number = MONTHS.get(word.lower())
        if number is None:
            continue
        if word.lower() in _AMBIGUOUS and (not word[0].isupper() or position == 0):
            continue
        months.add(number)
    spans: list[tuple[datetime, datetime]] = []
    if now is not None and not years:  # a year named outright wins: "last week, on November 6, 2023" is 2023's
        now = now.astimezone(UTC)
        for match in _RELATIVE.finditer(query):
            _relative(match, now, years, months, spans)
    return Period(frozenset(years), frozenset(months), tuple(spans))


def _relative(
    match: re.Match[str], now: datetime, years: set[int], months: set[int], spans: list[tuple[datetime, datetime]]
) -> None:
    """Add what one relative phrase names: a year or a month to the sets, days and weeks as spans."""
    today, yesterday, which, this_unit, count, ago_unit, past_count, past_unit = match.groups()
    if today or yesterday:
        _back("day", 0 if today else 1, now, years, months, spans)
    elif which:
        _back(this_unit.lower(), 0 if which.lower() == "this" else 1, now, years, months, spans)
    elif count:
        _back(ago_unit.lower(), _number(count), now, years, months, spans)
    else:
        length = timedelta(days=1 if past_unit.lower() == "day" else 7)
        spans.append((now - _number(past_count) * length, now + timedelta(seconds=1)))


def _back(
    unit: str, n: int, now: datetime, years: set[int], months: set[int], spans: list[tuple[datetime, datetime]]
) -> None:
    """The day, week (from Monday), month or year `n` of them before the current one (0: the current one)."""
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if unit == "day":
        spans.append((midnight - timedelta(days=n), midnight - timedelta(days=n - 1)))
    elif unit == "week":
        monday = midnight - timedelta(days=midnight.weekday())
        spans.append((monday - timedelta(days=7 * n), monday - timedelta(days=7 * (n - 1))))
    elif unit == "month":
        total = now.year * 12 + (now.month - 1) - n
        years.add(total // 12)
        months.add(total % 12 + 1)
    else:
        years.add(now.year - n)


def _number(text: str) -> int:
    return int(text) if text.isdigit() else _COUNTS[text.lower()]
