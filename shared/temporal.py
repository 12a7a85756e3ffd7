"""The period a query names ("in May 2023", "in 2022", "last June's trip"), for ranking memories that
occurred then higher (time anchoring). Pure: no clock, no IO.

Recognised: a year (1900–2099), a month by its full English name (or "Sept"), both together. A month
named without a year means that month in any year; a year without a month, the whole year. "May" and
"March" are also a verb: they count only capitalised and not as the query's first word ("What did she
do in May?", not "May I ask what she did?"). Any number from 1900 to 2099 standing alone counts as a year
("room 2001" too). Relative phrases ("last year", "yesterday") are not read:
they would need the writer's "now", which a stored memory's time does not carry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

_NAMES = "january february march april may june july august september october november december"
MONTHS = {name: number for number, name in enumerate(_NAMES.split(), start=1)}
MONTHS["sept"] = 9
_AMBIGUOUS = {"may", "march"}  # also verbs
_YEAR = re.compile(r"(?<![\d.,])(19\d\d|20\d\d)(?!\d|[.,]\d|s\b)")  # not 2,023 / 2023.5 / 1990s
_WORD = re.compile(r"[A-Za-z]+")


@dataclass(frozen=True)
class Period:
    """Years and months named by a query; a memory occurred in it if its year is one of `years` (or no year
    was named) and its month one of `months` (or no month was named)."""

    years: frozenset[int] = frozenset()
    months: frozenset[int] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.years or self.months)

    def contains(self, moment: datetime) -> bool:
        if not self:
            return False
        return (not self.years or moment.year in self.years) and (not self.months or moment.month in self.months)


def query_period(query: str) -> Period:
    """The years and months a query names (an empty Period when it names none)."""
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
    return Period(frozenset(years), frozenset(months))
