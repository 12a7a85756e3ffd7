"""The evidence gate, pure: whether anything in a store is about a query at all, in absolute terms.

Relevance (the composite's similarity component) is relative: its lexical half is a memory's BM25 against the
query's best, so the best lexical match in any store scores 1, whatever the store holds. Evidence is not: it is
made of what one memory and the query share, measured the same way in every store —

    evidence = cosine_weight   * max(0, cosine - floor) / (1 - floor)        the query's raw cosine to the memory
             + coverage_weight * sum(idf of query terms the memory has) / sum(idf of all query terms)
             - unknown_name_weight * share of the query's names the store has never seen

A query whose best candidate has less evidence than `min_evidence` returns nothing (`select.py`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class GateParams:
    """The evidence gate's settings (`Settings.retrieval` builds them; docs/retrieval.md has how they were chosen)."""

    min_evidence: float = 0.15  # 0 turns the gate off
    cosine_floor: float = 0.15  # MiniLM's cosine between unrelated texts reaches ~0.15: below it counts 0
    cosine_weight: float = 0.7
    coverage_weight: float = 0.3
    unknown_name_weight: float = 0.3


@dataclass(frozen=True)
class QueryTerms:
    """What evidence needs of the query in one tenant: each query lexeme's IDF there, and its names' share unknown."""

    idf: Mapping[str, float]
    unknown_share: float = 0.0
    unknown_names: tuple[str, ...] = ()

    @property
    def lexemes(self) -> list[str]:
        return sorted(self.idf)


# Months and weekdays are capitalised but name a time, which a memory keeps in its date, not in its words ("what did
# she do in November?": LoCoMo's turns never say the month): they are no names.
CALENDAR = frozenset(
    (
        *("january", "february", "march", "april", "may", "june", "july", "august", "september", "october"),
        *("november", "december", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov"),
        *("dec", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "mon", "tue"),
        *("tues", "wed", "thu", "thur", "thurs", "fri", "sat", "sun"),
    )
)
# The lexemes (the english configuration's stems) of the words a query names a period with: when it names one, the
# period's search and the memories' dates answer them, so no memory's words need to cover them (nor its numbers:
# "4 days ago", "in 2023").
TIME_LEXEMES = CALENDAR | frozenset(
    (
        *("septemb", "octob", "novemb", "decemb", "januari", "februari", "juli", "yesterday", "today", "tonight"),
        *("tomorrow", "ago", "last", "past", "previous", "next", "day", "week", "weekend", "month", "year"),
        *("decad", "centuri", "morn", "afternoon", "even", "night", "earlier", "later", "recent"),
    )
)
_WORD = re.compile(r"[^\W\d_][\w'’-]*")
_SENTENCE_END = re.compile(r"[.!?:;\"“”]\s*$")
_POSSESSIVE = re.compile(r"['’]s$")


def names_in(text: str) -> list[str]:
    """The query's names: words in title case (a capital, then lower-case letters) that do not start a sentence
    ("What does Zorblax drink?" → ["Zorblax"]), in order, each once. A question's first word is capitalised by
    grammar, not because it names anything; a single letter, a month or a weekday names nothing a memory's words
    would hold. Acronyms and identifiers ("PSP", "BlaER1", "Rpl23") are no names: a scientific claim names
    genes and assays its evidence need not spell (SciFact: 2.5 % of the claims blocked with them, 0.4 % without)."""
    names: list[str] = []
    for match in _WORD.finditer(text):
        word = match.group().rstrip("'’-")
        before = text[: match.start()]
        if not word[:1].isupper() or not before.strip() or _SENTENCE_END.search(before):
            continue
        if len(word) < 2 or word.lower() in CALENDAR:  # "I", an initial; a month, a weekday
            continue
        stem = _POSSESSIVE.sub("", word)
        if not (stem.isalpha() and stem[1:].islower()):  # an acronym, an identifier, a hyphenated term
            continue
        if word not in names:
            names.append(word)
    return names


def idf(df: int, documents: int) -> float:
    """Lucene's IDF, as BM25 here uses it (`storage.bm25.lexical_plan`)."""
    n = max(documents, 1)
    df = min(max(df, 0), n)
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def query_terms(
    df: Mapping[str, int], documents: int, names: Mapping[str, Mapping[str, int]] | None = None
) -> QueryTerms:
    """The query's terms in a tenant from their document frequencies there (`df`: every query lexeme, 0 for those
    the store lacks) and its documents; `names`: each of the query's names with its lexemes' document frequencies
    (a stop word has no lexeme and is no name). A name is unknown when no memory of the tenant has its lexemes."""
    known = {name: lexemes for name, lexemes in (names or {}).items() if lexemes}
    unknown = tuple(name for name, lexemes in known.items() if not any(count > 0 for count in lexemes.values()))
    return QueryTerms(
        idf={term: idf(count, documents) for term, count in df.items()},
        unknown_share=len(unknown) / len(known) if known else 0.0,
        unknown_names=unknown,
    )


def without_time(df: Mapping[str, int]) -> dict[str, int]:
    """The query's lexemes less those that name a time (`TIME_LEXEMES`, numbers): for a query that names a period."""
    return {t: n for t, n in df.items() if t not in TIME_LEXEMES and not t.isdigit()}


def coverage(terms: QueryTerms, memory_terms: Collection[str], total: float | None = None) -> float:
    """The IDF-weighted share of the query's terms the memory has (0 when the query has none); `total`: the sum of
    the query terms' IDF, when the caller weighs many memories."""
    total = sum(terms.idf.values()) if total is None else total
    if total <= 0:
        return 0.0
    return sum(terms.idf.get(term, 0.0) for term in set(memory_terms)) / total


def evidence(cosine: float | None, covered: float, unknown_share: float, params: GateParams) -> float:
    """How much a memory says about the query, in absolute terms (the module's formula). `cosine` None: the memory
    has no vector to compare (a fingerprint), so its words stand for both parts."""
    if cosine is None:
        matched = (params.cosine_weight + params.coverage_weight) * covered
    else:
        floor = min(max(params.cosine_floor, 0.0), 0.99)
        dense = max(0.0, cosine - floor) / (1 - floor)
        matched = params.cosine_weight * dense + params.coverage_weight * covered
    return matched - params.unknown_name_weight * unknown_share
