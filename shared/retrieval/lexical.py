"""Full-text ranking, pure: BM25's parameters and which query terms select candidates.

`storage.bm25.lexical_candidates` runs the ranking in SQL with these; `Settings.lexical` builds the parameters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LexicalParams:
    """BM25 over the tsvector with per-tenant document frequencies (`Settings.lexical` builds it)."""

    config: str = "english"  # the text search configuration (stemming, stop words)
    # k1, b: Anserini/Pyserini's defaults, the BM25 of the SciFact reference points (Lucene's own: 1.2 / 0.75)
    k1: float = 0.9
    b: float = 0.4
    # A term in more than this share of a tenant's memories (and more than common_min_df of them) only scores
    # candidates, it does not select them (Elasticsearch's common-terms cutoff).
    common_ratio: float = 0.05
    common_min_df: int = 500
    # Count a term's frequency in a memory (BM25 proper); off: a matched term counts once (cheaper)
    term_frequency: bool = True
    # Of the rare terms, the rarest select candidates while their document frequencies add up to at most this
    # (the rest only score): bounds the rows a query scores in a large store; 0 = no limit.
    select_budget: int = 20_000
    # When more memories than this may match, they are ranked first by BM25 counting each term once (cheap), and
    # only this many best are scored with term frequency; 0 = score every match with it. When every query term
    # is common, the memories with all of them are candidates only up to this many.
    rescore_window: int = 1_000


def select_terms(terms: Sequence[str], df: Mapping[str, int], *, budget: int) -> list[str]:
    """The terms that select candidates: the rarest first, while their document frequencies add up to at
    most `budget` (the rarest always; 0 = no limit). The rest still score every candidate: this bounds
    the rows a query scores in a large store, and a memory that only shares the dropped, more common
    terms with the query would have ranked low anyway."""
    if not budget:
        return list(terms)
    chosen: list[str] = []
    total = 0
    for term in sorted(terms, key=lambda t: (df.get(t, 0), t)):
        if chosen and total + df.get(term, 0) > budget:
            break
        chosen.append(term)
        total += df.get(term, 0)
    return chosen
