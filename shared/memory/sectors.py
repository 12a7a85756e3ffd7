"""The five memory sectors and OpenMemory's HSG regex classifier.

Decay rates and weights are the architecture seed's. Patterns and rules are OpenMemory's
`sector_configs` / `classify_content` (CaviraOSS/OpenMemory, packages/openmemory-js/src/memory/hsg.ts
and its Python port packages/openmemory-py/src/openmemory/memory/hsg.py), with four deliberate changes:
- matches are counted per occurrence, as the Python port's `len(pattern.findall(text))` does; the JS
  `text.match(pattern).length` counts capture groups instead, so patterns with more groups weighed more;
- semantic also matches "define|definition|meaning", the seed's documented first semantic pattern;
- `I\\s*'?m going to` instead of `I\\s+'?m`, which could never match "I'm going to";
- "recipe" instead of the upstream typo "recipie".
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeVar

from shared.api.common import SECTORS

DEFAULT_SECTOR = "semantic"
# OpenMemory: an extra sector must score at least max(1, 30% of the primary's score).
ADDITIONAL_FRACTION = 0.3
ADDITIONAL_MIN_SCORE = 1.0
NO_MATCH_CONFIDENCE = 0.2


def _patterns(*sources: str) -> tuple[re.Pattern[str], ...]:
    # Case-insensitive by lower-casing the text once (classify) and the patterns here: the same matches
    # as re.IGNORECASE for these ASCII word lists, at about half the cost on the ingest path.
    for source in sources:  # lower-casing must not turn an escape such as \\S or \\B into another one
        if re.search(r"\\[A-Z]", source):
            raise ValueError(f"sector pattern {source!r} has an upper-case escape; it cannot be lower-cased")
    return tuple(re.compile(source.lower()) for source in sources)


@dataclass(frozen=True)
class SectorConfig:
    name: str
    decay_lambda: float
    weight: float
    patterns: tuple[re.Pattern[str], ...]
    description: str
    # The patterns split for speed (same counts): a `\b(word|word|...)\b` pattern of plain words counts the text's
    # words in its set, from one tokenisation shared by every sector; the others run as regular expressions.
    word_sets: tuple[frozenset[str], ...] = field(init=False, repr=False)
    expressions: tuple[re.Pattern[str], ...] = field(init=False, repr=False)
    # each word of the word sets, with how many of them hold it (each counts the word once)
    word_weights: Mapping[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        words = [(pattern, _plain_words(pattern.pattern)) for pattern in self.patterns]
        object.__setattr__(self, "word_sets", tuple(found for _, found in words if found is not None))
        object.__setattr__(self, "expressions", tuple(pattern for pattern, found in words if found is None))
        object.__setattr__(self, "word_weights", MappingProxyType(Counter(w for ws in self.word_sets for w in ws)))


_WORD_ALTERNATION = re.compile(r"\\b\(([a-z|?]+)\)\\b")


def _plain_words(source: str) -> frozenset[str] | None:
    """The words of a `\b(w1|w2|...)\b` pattern of plain lower-case words (`ws?` meaning w and ws); None for any
    other pattern. Such a pattern matches exactly the text's maximal runs of word characters that are one of its
    words: the alternatives hold only word characters and \b bounds them on both sides."""
    match = _WORD_ALTERNATION.fullmatch(source)
    if match is None:
        return None
    words: set[str] = set()
    for alternative in match.group(1).split("|"):
        stem, optional = (alternative[:-1], True) if alternative.endswith("?") else (alternative, False)
        if not stem.isalpha() or "?" in stem:
            return None
        words.update((stem, stem[:-1]) if optional else (stem,))
    return frozenset(words)


SECTOR_CONFIGS: Mapping[str, SectorConfig] = MappingProxyType(
    {
        "episodic": SectorConfig(
            name="episodic",
            decay_lambda=0.015,
            weight=1.2,
            patterns=_patterns(
                r"\b(today|yesterday|tomorrow|last\s+(week|month|year)|next\s+(week|month|year))\b",
                r"\b(remember\s+when|recall|that\s+time|when\s+I|I\s+was|we\s+were)\b",
                r"\b(went|saw|met|felt|heard|visited|attended|participated)\b",
                r"\b(at\s+\d{1,2}:\d{2}|on\s+(monday|tuesday|wednesday|thursday|friday|saturday|sunday))\b",
                r"\b(event|moment|experience|incident|occurrence|happened)\b",
                r"\bI\s*'?m\s+going\s+to\b",
            ),
            description="Events and experiences: what happened, when and where.",
        ),
        "semantic": SectorConfig(
            name="semantic",
            decay_lambda=0.005,
            weight=1.0,
            patterns=_patterns(
                r"\b(is\s+a|represents|means|stands\s+for|defined\s+as|define|definition|meaning)\b",
                r"\b(concept|theory|principle|law|hypothesis|theorem|axiom)\b",
                r"\b(fact|statistic|data|evidence|proof|research|study|report)\b",
                r"\b(capital|population|distance|weight|height|width|depth)\b",
                r"\b(history|science|geography|math|physics|biology|chemistry)\b",
                r"\b(know|understand|learn|read|write|speak)\b",
            ),
            description="Facts and knowledge, independent of when they were learned.",
        ),
        "procedural": SectorConfig(
            name="procedural",
            decay_lambda=0.008,
            weight=1.1,
            patterns=_patterns(
                r"\b(how\s+to|step\s+by\s+step|guide|tutorial|manual|instructions)\b",
                r"\b(first|second|then|next|finally|afterwards|lastly)\b",
                r"\b(install|run|execute|compile|build|deploy|configure|setup)\b",
                r"\b(click|press|type|enter|select|drag|drop|scroll)\b",
                r"\b(method|function|class|algorithm|routine|recipe)\b",
                r"\b(to\s+do|to\s+make|to\s+build|to\s+create)\b",
            ),
            description="How-to knowledge: steps, processes, skills.",
        ),
        "emotional": SectorConfig(
            name="emotional",
            decay_lambda=0.020,
            weight=1.3,
            patterns=_patterns(
                r"\b(feel|feeling|felt|emotions?|mood|vibe)\b",
                r"\b(happy|sad|angry|mad|excited|scared|anxious|nervous|depressed)\b",
                r"\b(love|hate|like|dislike|adore|detest|enjoy|loathe)\b",
                r"\b(amazing|terrible|awesome|awful|wonderful|horrible|great|bad)\b",
                r"\b(frustrated|confused|overwhelmed|stressed|relaxed|calm)\b",
                r"\b(wow|omg|yay|nooo|ugh|sigh)\b",
                r"!{2,}",
            ),
            description="Feelings and sentiment.",
        ),
        "reflective": SectorConfig(
            name="reflective",
            decay_lambda=0.001,
            weight=0.8,
            patterns=_patterns(
                r"\b(realize|realized|realization|insight|epiphany)\b",
                r"\b(think|thought|thinking|ponder|contemplate|reflect)\b",
                r"\b(understand|understood|understanding|grasp|comprehend)\b",
                r"\b(pattern|trend|connection|link|relationship|correlation)\b",
                r"\b(lesson|moral|takeaway|conclusion|summary|implication)\b",
                r"\b(feedback|review|analysis|evaluation|assessment)\b",
                r"\b(improve|grow|change|adapt|evolve)\b",
            ),
            description="Meta-cognition: insights, lessons, conclusions.",
        ),
    }
)


@dataclass(frozen=True)
class Classification:
    primary: str
    additional: tuple[str, ...]
    confidence: float
    scores: Mapping[str, float]

    @property
    def sectors(self) -> tuple[str, ...]:
        """Primary first, then the additional sectors."""
        return (self.primary, *self.additional)


def sector_score(text: str, config: SectorConfig) -> float:
    """Pattern occurrences in the text (any case) times the sector's weight."""
    lowered = text.lower()
    return _score(lowered, Counter(_WORD.findall(lowered)), config)


_WORD = re.compile(r"\w+")


def _score(lowered: str, words: Counter[str], config: SectorConfig) -> float:
    """`sum(len(p.findall(lowered)) for p in config.patterns) * weight`, the plain-word patterns counted from
    `words` (the text's maximal word-character runs): the same sum, a third of the cost on long chunks."""
    weights = config.word_weights
    # from whichever side is shorter: a chat turn's few words, or the sector's word list against a long chunk's
    if len(words) < len(weights):
        counted = sum(n * weights[word] for word, n in words.items() if word in weights)
    else:
        counted = sum(words[word] * k for word, k in weights.items() if word in words)
    return (counted + sum(len(pattern.findall(lowered)) for pattern in config.expressions)) * config.weight


def _score_by_patterns(lowered: str, config: SectorConfig) -> float:
    """The reference: every pattern run as a regular expression (the tests hold `_score` to it)."""
    return sum(len(pattern.findall(lowered)) for pattern in config.patterns) * config.weight


def classify(text: str, *, default_sector: str = DEFAULT_SECTOR) -> Classification:
    """Primary, additional sectors and confidence by OpenMemory's pattern-score rules."""
    validate_sector(default_sector)
    lowered = text.lower()
    words = Counter(_WORD.findall(lowered))
    scores = MappingProxyType({name: _score(lowered, words, SECTOR_CONFIGS[name]) for name in SECTORS})
    # sorted() is stable, so ties keep SECTORS order.
    ranked = sorted(SECTORS, key=lambda name: -scores[name])
    primary, top, runner_up = ranked[0], scores[ranked[0]], scores[ranked[1]]
    if top <= 0:
        return Classification(default_sector, (), NO_MATCH_CONFIDENCE, scores)
    threshold = max(ADDITIONAL_MIN_SCORE, top * ADDITIONAL_FRACTION)
    additional = tuple(name for name in ranked[1:] if scores[name] > 0 and scores[name] >= threshold)
    confidence = min(1.0, top / (top + runner_up + 1))
    return Classification(primary, additional, confidence, scores)


def validate_sector(name: str) -> str:
    """Return the name if it is one of the five sectors, else raise ValueError."""
    if name not in SECTOR_CONFIGS:
        raise ValueError(f"unknown sector {name!r}; expected one of: {', '.join(SECTORS)}")
    return name


T = TypeVar("T")


def group_sectors(per_sector: Mapping[str, T]) -> list[tuple[T, list[str]]]:
    """Sectors grouped by the object they share (a provider, a query vector): one group in simple mode."""
    groups: dict[int, tuple[T, list[str]]] = {}
    for sector, value in per_sector.items():
        groups.setdefault(id(value), (value, []))[1].append(sector)
    return list(groups.values())
