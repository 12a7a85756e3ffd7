"""Near copies among the memories a query returns, pure: the same words, in any case, punctuation or order.

A store holds a statement twice when it was said twice ("Thanks, Mel!" and "thanks mel"): the identical content is
one memory already (its hash), but a copy that differs in case, punctuation or word order is another, and both match a
question alike. Returned side by side, the second adds nothing; moved below the other matches, it still comes back.
No vectors: comparing the words is what makes it cheap enough to run on every query (MMR, `diversity` < 1, compares
vectors and stays opt-in).
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from typing import TypeVar

T = TypeVar("T", bound=Hashable)

_WORD = re.compile(r"\w+")


def words_of(text: str) -> tuple[str, ...]:
    """A text's words, case-folded and sorted: two texts with the same words in any order and punctuation are equal."""
    return tuple(sorted(word.casefold() for word in _WORD.findall(text)))


def copies_last(ranked: Sequence[tuple[T, str]]) -> tuple[list[T], dict[T, T]]:
    """`ranked` (id and text, best first) with every near copy of a memory above it moved below the others, in their
    order. Returns the order and, for each copy, the first memory above it with the same words. A text with no words
    (an emoji, a lone punctuation mark) is no one's copy."""
    first: dict[tuple[str, ...], T] = {}
    kept: list[T] = []
    copies: list[T] = []
    copy_of: dict[T, T] = {}
    for item, text in ranked:
        key = words_of(text)
        original = first.get(key) if key else None
        if original is None:
            if key:
                first[key] = item
            kept.append(item)
        else:
            copies.append(item)
            copy_of[item] = original
    return kept + copies, copy_of
