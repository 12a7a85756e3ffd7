"""Updates found at write time, without an LLM: does a new memory replace one of the tenant's earlier ones?

A new text is an update when it says that something changed (a change cue: "no longer", "switched", "moved to",
"sold", "now", "cut down to", ...; not negated: "I won't quit") and one earlier memory of the same speaker is
clearly its nearest: cosine at least `min_similarity`, and ahead of the next earlier memory by `margin`. The margin
does most of the work: in a conversation a turn has many near neighbours (a reply, an elaboration), an update has
one (the statement it replaces). Time decides, not arrival: a memory about a later time is never replaced by one
about an earlier time. Pure: the search for the earlier memories is the engine's (`MemoryEngine.supersede_older`).
Measured in docs/benchmarks.md, "Facts that change"; what was tried, docs/experiments.md.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.text import FACT_KEY_MAX_WORDS

# What says that a fact changed. Phrases, matched on word boundaries, case-insensitive; a verb's usual forms are
# spelled out. Words that also open ordinary news ("new", "finally", "started") are not cues on their own: on LoCoMo
# they fired on one turn in eight.
_AMOUNT = r"([$€£]?\d+|one|two|three|four|five|six|seven|eight|nine|ten|a|an|half)\b"
# What is true now: a weaker cue than a change, since a restatement says it too ("Writing's a huge part of me now").
# ("since I was a kid" is a duration, "since we last talked" a greeting: on LoCoMo every one was)
_HOLDS_NOW = [r"now|these days|nowadays|from now on|currently|at the moment|since the|since then|ever since"]
_GONE = [  # the old value is gone: negations themselves, never read as negated
    r"no longer",
    r"not any ?more",
    r"any ?more",
    r"instead(?! of \w+ing\b)( of)?",  # not "instead of getting stuck": a choice, not a value replaced
]
_CHANGED = [
    r"(quit|quitting|left(?! for)|leaving(?! for)|sold|selling|cancell?ed|cancell?ing|stopped|paused|dropped|ditched)",
    r"gave up|given up|giving up|broke up|moved out|got rid of",
    # it was replaced
    r"(switched|switching|swapped|swapping|replaced|replacing|traded|upgraded|downgraded)",
    r"(moved|moving|relocated|transferred)( \w+){0,5} (to|into|over)",
    r"(changed|changing)( \w+){0,2} (to|from|into)|changed (my|our|the|his|her|their)",
    # a quantity changed
    r"(raised|increased|decreased|reduced|lowered|bumped|cut)( (down|up|back))?( \w+){0,2} to",
    # to an amount: not "went to" (a visit), not "came up to me" (an approach)
    rf"(went|gone|come|came|i'm|i am|we're|we are|it's|it is|is|are|am) (now )?(up|down) to (about |around )?{_AMOUNT}",
    # a correction: what was said was wrong
    r"turns out|turned out(?! (to be|well|great|fine|nicely|badly|ok|okay|perfect|amazing|awesome|good)\b)",
    r"cut (down|back)|got a raise|got promoted|was promoted",
    *_HOLDS_NOW,
]
# "now" that means this minute, not a new state of things ("right now", "for now", "sending it now").
# And "now" after a duration is "up to now" ("I've been dreaming of this for a while now").
_MOMENT = re.compile(
    r"\b(right|just|for|until|till|by|up to|(for|in) (a (long |little )?while|ages|a long time|some time|"
    r"(a few|many|several|\w+) (years|months|weeks|days)))\W+$",
    re.IGNORECASE,
)
# A change to a speaker's fact is said of the speaker or a third party; a sentence to the listener ("you found
# your way, and now you're helping others", "you can use oil instead of butter") is about them, or advice.
_TO_LISTENER = re.compile(r"\b(you|your|you're|youre|yours|yourself|you've|you'll|ya)\b", re.IGNORECASE)
# A photo's caption or a stage direction, "[shares a photo: ...]": not said by anyone.
_CAPTION = re.compile(r"\[[^\]]*\]")
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\s+[-\u2013\u2014]+\s+")


def _alternatives(phrases: list[str]) -> str:
    return r"\b(" + "|".join(f"(?:{p})" for p in phrases) + r")\b"


CUES = re.compile(_alternatives(_GONE + _CHANGED), re.IGNORECASE)
HOLDS_NOW = re.compile(_alternatives(_HOLDS_NOW), re.IGNORECASE)
_GONE_CUES = re.compile(_alternatives(_GONE), re.IGNORECASE)
# A change cue right after one of these is a change that did not happen ("I won't quit", "might switch").
_NEGATED = re.compile(
    r"\b(not|never|no|won't|wont|don't|dont|didn't|didnt|can't|cant|couldn't|wouldn't|shouldn't|isn't|wasn't|"
    r"haven't|hasn't|hadn't|aren't|weren't|without|if|whether|maybe|might|should|could|would)\b(\W+\w+){0,2}\W*$",
    re.IGNORECASE,
)
# "Name: text", as conversations are often stored (LoCoMo's turns, a chat log): the speaker is the name.
_SPEAKER_PREFIX = re.compile(r"^\s*([A-Z][\w.'-]*(?: [A-Z][\w.'-]*){0,2})\s*:\s+\S")
_SPEAKER_KEYS = ("speaker", "author", "role", "user_name", "name", "person")


@dataclass(frozen=True)
class UpdateRules:
    on: bool = True
    min_similarity: float = 0.3  # the earlier memory's cosine to the new one, at least
    margin: float = 0.1  # ... and ahead of the next earlier memory of the speaker by this much
    # A cue that only says what holds now ("now", "currently") replaces a statement less alike than this: nearer, the
    # new text says what the old one said (on LoCoMo, a restatement in a later session: 0.77-0.88; the updates'
    # cases with such a cue, 0.43-0.71)
    restatement_similarity: float = 0.75
    candidates: int = 4  # nearest memories embedded again for the decision (each costs the model a short text)


@dataclass(frozen=True)
class Earlier:
    """A memory stored before, as the decision sees it."""

    id: uuid.UUID
    content: str
    metadata: Mapping[str, Any]
    when: datetime  # when it happened (occurred_at, else when it was stored)
    similarity: float  # cosine to the new memory
    current: bool  # not superseded already


@dataclass(frozen=True)
class Decision:
    replaces: uuid.UUID
    cue: str
    similarity: float
    margin: float | None  # over the next earlier memory; None when there was none


def sentences(text: str) -> list[str]:
    """A text's sentences, captions left out."""
    return [s for s in _SENTENCE_END.split(_CAPTION.sub(" ", text)) if s.strip()]


def change_cue(content: str) -> str | None:
    """The first change cue of a text that is not negated, or None. The cue's sentence decides: a question is never
    an update, nor a sentence said to the listener, nor "now" that means this minute."""
    return next(change_cues(content), None)


def change_cues(content: str) -> Iterator[str]:
    """Every change cue of a text that is not negated, in order (`change_cue`)."""
    for sentence in sentences(speaker_and_text(content, {})[1]):
        if sentence.rstrip().endswith("?") or _TO_LISTENER.search(sentence):
            continue
        for match in CUES.finditer(sentence):
            before = sentence[: match.start()]
            if match.group(0).lower() == "now" and _MOMENT.search(before):
                continue
            if _GONE_CUES.fullmatch(match.group(0)) or not _NEGATED.search(before):
                yield match.group(0).lower()


def a_statement(content: str) -> bool:
    """Whether a text is short enough to state a fact (`FACT_KEY_MAX_WORDS`, 64 words, as one memory per fact reads
    it): a longer one is a passage (an abstract, a note, a page) that holds many facts, and neither replaces nor is
    replaced by one statement. On SciFact's abstracts, stored as memories, the rule hid true abstracts."""
    return len(content.split()) <= FACT_KEY_MAX_WORDS


def states_something(content: str) -> bool:
    """Whether a text has a statement of the speaker's: a sentence of three words or more, not a question, not said
    to the listener. Only a statement can be replaced ("Hey Mel! Good to see you! How have you been?" holds no
    fact for a later one to change)."""
    return any(
        len(s.split()) >= 3 and not s.rstrip().endswith("?") and not _TO_LISTENER.search(s)
        for s in sentences(speaker_and_text(content, {})[1])
    )


def speaker_and_text(content: str, metadata: Mapping[str, Any]) -> tuple[str | None, str]:
    """Who says it (a metadata field, else a "Name: " prefix; None when neither says) and what is said."""
    named = next((metadata[k] for k in _SPEAKER_KEYS if isinstance(metadata.get(k), str) and metadata[k]), None)
    prefix = _SPEAKER_PREFIX.match(content)
    body = content[prefix.end(1) :].lstrip(" :") if prefix else content
    speaker = named or (prefix.group(1) if prefix else None)
    return (speaker.strip().casefold() if speaker else None), body


def decide(
    content: str,
    metadata: Mapping[str, Any],
    when: datetime,
    earlier: Sequence[Earlier],
    rules: UpdateRules,
) -> Decision | None:
    """The earlier memory the new one replaces, if any. `earlier`: the new memory's nearest memories (itself
    excluded), any order."""
    if not rules.on or not a_statement(content):
        return None
    cues = list(change_cues(content))
    if not cues:
        return None
    speaker = speaker_and_text(content, metadata)[0]
    # The speaker's current memories about no later time than the new one (one about a later time is not replaced
    # by it; a memory without a speaker may be anyone's, the tenant's own most often).
    own = sorted(
        (
            e
            for e in earlier
            if e.current
            and e.when <= when
            and _same(speaker, e)
            and a_statement(e.content)
            and states_something(e.content)
        ),
        key=lambda e: -e.similarity,
    )
    if not own or own[0].similarity < rules.min_similarity:
        return None
    if own[0].similarity >= rules.restatement_similarity and all(HOLDS_NOW.fullmatch(c) for c in cues):
        return None  # says again what the earlier memory said, with "now"
    # The lead is over every other current near memory, whoever said it and whatever it is: the other speaker's
    # reply on the same topic, a question about it, are near neighbours too, and an update has one. (Over the
    # speaker's memories alone, LoCoMo got 11 false supersessions of 2,760 turns offline; over all, 1.)
    others = sorted(
        (e.similarity for e in earlier if e.id != own[0].id and e.current),
        reverse=True,
    )
    margin = own[0].similarity - others[0] if others else None
    if margin is not None and margin < rules.margin:
        return None
    return Decision(own[0].id, cues[0], own[0].similarity, margin)


def _same(speaker: str | None, memory: Earlier) -> bool:
    theirs = speaker_and_text(memory.content, memory.metadata)[0]
    return speaker is None or theirs is None or theirs == speaker
