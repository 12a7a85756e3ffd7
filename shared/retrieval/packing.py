"""Token packing (membox): fill a token budget greedily by score, and say how full it is."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shared.text import estimate_tokens


@dataclass(frozen=True)
class Packing:
    chosen: list[int]  # indices into the ranked list, in rank order
    tokens: int
    budget: int
    considered: int

    @property
    def footnote(self) -> str:
        """membox's usage line, e.g. "returned 12/48 memories, ~1,930/2,000 tokens"."""
        return f"returned {len(self.chosen)}/{self.considered} memories, ~{self.tokens:,}/{self.budget:,} tokens"


def pack(texts: Sequence[str], *, budget: int, limit: int) -> Packing:
    """Greedy knapsack over texts ranked best first: admit each one whose estimated cost still fits,
    skip the ones that don't (a later, shorter one may), stop at `limit` items."""
    chosen: list[int] = []
    used = 0
    for index, text in enumerate(texts):
        if len(chosen) >= limit:
            break
        cost = estimate_tokens(text)
        if used + cost <= budget:
            chosen.append(index)
            used += cost
    return Packing(chosen, used, budget, len(texts))
