"""Versions of a fact on the read path, pure: which question asks about the past, and how a version pair is ordered.

A `supersedes` link (newer, older) makes two memories one fact. By default the newer one answers and the older is
not returned (`expand.answer_by_latest`); returned anyway (`include_superseded`), the older ranks right below it.
A question about the past ("Where did Alice live before?") swaps the roles: the older answers, the newer below it.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Hashable, Iterable, Sequence
from typing import TypeVar

T = TypeVar("T", bound=Hashable)

# What a fact used to be. Tight on purpose: a cue that fires on an ordinary question only shows the older version
# beside the newer one (and above it), but a question about the current fact that fires gets the stale answer first.
# "before" alone is too common ("before the race", "has she been there before?"), so it counts only at the end of a
# question not in the perfect ("Where did Alice live before?"), before "that"/"then", or before a change ("before she
# moved"); "old", "previous" and "former" only before a noun of the things that change (not "old friend").
_CHANGES = r"(?:moved|moving|move|switched|switching|changed|changing|relocated|quit|the move|the switch|the change)"
_THINGS = (
    r"(?:job|work|role|position|title|employer|company|boss|manager|team|address|home|house|flat|apartment|place|"
    r"city|town|country|neighbou?rhood|car|bike|phone|number|email|name|school|gym|diet|plan|schedule|salary|rent|"
    r"partner|doctor|dentist|laptop|hobby)"
)
_PAST_CUES = re.compile(
    "|".join(
        (
            # "did she use to", only where it cannot be "what did she use to make it" (an instrument)
            r"^\s*(?:(?:where|when|who|how often|how much|how many)\s+)?did(?:n't| not)?(?:\s+\w+){1,3}\s+use to\b",
            r"\b(?:previously|formerly|originally)\b",
            rf"\b(?:old|previous|former|earlier)\s+{_THINGS}s?\b",
            r"\bin the past\b",
            r"\bback then\b",
            r"\bno longer\b",
            rf"\bbefore\s+(?:(?:he|she|they|i|we|you|it|\w+)\s+)?{_CHANGES}\b",
            r"\bbefore (?:that|then)\b",
        )
    ),
    re.IGNORECASE,
)
# "before" closing the question, but not "has she been there before?" (experience, not an earlier version)
# "used to", but not "is she used to the cold?" (accustomed) or "it was used to cut" (employed)
_USED_TO = re.compile(r"\bused to\b", re.IGNORECASE)
_ACCUSTOMED = re.compile(
    r"(?:\b(?:is|am|are|was|were|be|been|being|get|gets|got|getting)|'s|'re|'m)\s+(?:\w+\s+){0,2}used to\b",
    re.IGNORECASE,
)
_BEFORE_AT_END = re.compile(r"\bbefore\s*[?.!]*\s*$", re.IGNORECASE)
_PERFECT = re.compile(r"\b(?:has|have|had|ever)\b|'ve\b", re.IGNORECASE)


def asks_about_the_past(question: str) -> bool:
    """Whether a question asks what a fact was before it changed ("used to", "previously", "her old job", "before she
    moved", "Where did Alice live before?"): then the older version answers (`answering_order`)."""
    if _PAST_CUES.search(question) or (_USED_TO.search(question) and not _ACCUSTOMED.search(question)):
        return True
    return bool(_BEFORE_AT_END.search(question)) and not _PERFECT.search(question)


def answering_order(
    ranked: Sequence[T],
    supersedes: Iterable[tuple[T, T]],
    *,
    past: bool = False,
) -> tuple[list[T], dict[T, T]]:
    """`ranked` (best first) with each version pair (newer, older) of it in answering order: the one that answers
    (the newer; with `past` the older) takes the higher place of the two and the other comes right after it.

    Returns the new order and, for each memory that moved up, the memory whose place it took (its caller gives it that
    one's score, so the scores still read best first). Pairs with an end not in `ranked` are ignored; a chain settles
    pair by pair, and a cycle of links stops after as many rounds as there are pairs."""
    pairs = [(older, newer) if past else (newer, older) for newer, older in supersedes]
    order = list(ranked)
    position = {item: n for n, item in enumerate(order)}
    pairs = [(answer, other) for answer, other in pairs if answer in position and other in position and answer != other]
    took: dict[T, T] = {}
    for _ in range(len(pairs)):
        moved = False
        for answer, other in pairs:
            at_answer, at_other = position[answer], position[other]
            if at_answer < at_other:
                continue
            # the answer into the other's place, the other right after it; what lay between moves down by one
            order.pop(at_answer)
            order.insert(at_other, answer)
            took.setdefault(answer, other)
            for n in range(at_other, at_answer + 1):
                position[order[n]] = n
            moved = True
        if not moved:
            break
    return order, took


def superseded_note(successors: Sequence[uuid.UUID], since: str | None) -> str:
    """The trace's line for a superseded memory: "superseded by <id> on <date>"."""
    by = ", ".join(str(i) for i in successors) or "a newer memory"
    return f"superseded by {by}" + (f" on {since}" if since else "")


def answers_note(answers_for: Sequence[uuid.UUID]) -> str:
    """The trace's line for a memory that answers for older versions not returned."""
    return "answers for " + ", ".join(str(i) for i in answers_for) + " (superseded; include_superseded shows it)"
