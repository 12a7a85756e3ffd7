"""The five memory sectors and OpenMemory's HSG pattern classifier.

Decay rates and weights are the architecture seed's; the pattern lists follow OpenMemory's
`sector_configs` (hsg), whose seed excerpt shows only the first pattern of each sector.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

SECTORS: tuple[str, ...] = ("episodic", "semantic", "procedural", "emotional", "reflective")
DEFAULT_SECTOR = "semantic"
# OpenMemory: an extra sector must score at least max(1, 30% of the primary's score).
ADDITIONAL_FRACTION = 0.3
NO_MATCH_CONFIDENCE = 0.2


def _patterns(*sources: str) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(s, re.IGNORECASE) for s in sources)


@dataclass(frozen=True)
class SectorConfig:
    name: str
    decay_lambda: float
    weight: float
    patterns: tuple[re.Pattern[str], ...]
    description: str


SECTOR_CONFIGS: Mapping[str, SectorConfig] = {
    "episodic": SectorConfig(
        "episodic",
        0.015,
        1.2,
        _patterns(
            r"\b(today|yesterday|tomorrow|tonight|last\s+(night|week|month|year)|next\s+(week|month|year))\b",
            r"\b(remember\s+when|recall|that\s+time|when\s+I|I\s+was|we\s+were)\b",
            r"\b(went|saw|met|visited|attended|participated|arrived|left)\b",
            r"\b(at\s+\d{1,2}:\d{2}|on\s+\w+day|in\s+\d{4})\b",
            r"\b(event|moment|experience|incident|occurrence|happened|trip|meeting)\b",
            r"\bI\s*'?m\s+going\s+to\b",
        ),
        "Events and experiences: what happened, when and where.",
    ),
    "semantic": SectorConfig(
        "semantic",
        0.005,
        1.0,
        _patterns(
            r"\b(define|definition|meaning|means|concept|stands\s+for|defined\s+as|is\s+a|represents)\b",
            r"\b(theory|principle|law|hypothesis|theorem|axiom)\b",
            r"\b(fact|statistic|data|evidence|proof|research|study|report)\b",
            r"\b(capital|population|distance|weight|height|width|depth)\b",
            r"\b(history|science|geography|math|physics|biology|chemistry)\b",
            r"\b(know|knowledge|learn|information)\b",
        ),
        "Facts and knowledge, independent of when they were learned.",
    ),
    "procedural": SectorConfig(
        "procedural",
        0.008,
        1.1,
        _patterns(
            r"\b(how\s+to|step\s+by\s+step|guide|tutorial|manual|instructions)\b",
            r"\b(first|then|next|finally|afterwards|lastly)\b",
            r"\b(install|run|execute|compile|build|deploy|configure|setup|set\s+up)\b",
            r"\b(click|press|type|enter|select|drag|drop|scroll)\b",
            r"\b(method|function|algorithm|routine|recipe|process|workflow)\b",
            r"\b(to\s+do|to\s+make|to\s+build|to\s+create)\b",
        ),
        "How-to knowledge: steps, processes, skills.",
    ),
    "emotional": SectorConfig(
        "emotional",
        0.020,
        1.3,
        _patterns(
            r"\b(feel|feels|feeling|felt|emotion|mood|vibe)\b",
            r"\b(happy|sad|angry|mad|excited|scared|anxious|nervous|depressed|relieved|grateful|proud|lonely)\b",
            r"\b(love|hate|dislike|adore|detest|enjoy|loathe)\b",
            r"\b(amazing|terrible|awesome|awful|wonderful|horrible)\b",
            r"\b(frustrated|confused|overwhelmed|stressed|relaxed|calm|upset|worried)\b",
            r"\b(wow|omg|yay|ugh|sigh)\b",
            r"!{2,}",
        ),
        "Feelings and sentiment.",
    ),
    "reflective": SectorConfig(
        "reflective",
        0.001,
        0.8,
        _patterns(
            r"\b(realize|realized|realise|realised|realization|insight|epiphany)\b",
            r"\b(think|thought|thinking|ponder|contemplate|reflect|reflection)\b",
            r"\b(understand|understood|grasp|comprehend)\b",
            r"\b(pattern|trend|connection|relationship)\b",
            r"\b(lesson|moral|takeaway|conclusion)\b",
            r"\b(feedback|review|analysis|evaluation|assessment)\b",
            r"\b(improve|grow|adapt|evolve)\b",
        ),
        "Meta-cognition: insights, lessons, conclusions.",
    ),
}


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


def classify(text: str, *, default_sector: str = DEFAULT_SECTOR) -> Classification:
    """Score each sector by pattern matches × sector weight; the best is primary (OpenMemory's rules)."""
    scores = {
        name: sum(len(p.findall(text)) for p in cfg.patterns) * cfg.weight for name, cfg in SECTOR_CONFIGS.items()
    }
    # Stable sort keeps SECTORS order on ties.
    ranked = sorted(SECTORS, key=lambda s: -scores[s])
    primary, top = ranked[0], scores[ranked[0]]
    if top <= 0:
        return Classification(default_sector, (), NO_MATCH_CONFIDENCE, scores)
    threshold = max(1.0, top * ADDITIONAL_FRACTION)
    additional = tuple(s for s in ranked[1:] if scores[s] > 0 and scores[s] >= threshold)
    second = scores[ranked[1]]
    confidence = min(1.0, top / (top + second + 1))
    return Classification(primary, additional, confidence, scores)


def validate_sector(name: str) -> str:
    if name not in SECTOR_CONFIGS:
        raise ValueError(f"unknown sector {name!r}; expected one of {', '.join(SECTORS)}")
    return name
