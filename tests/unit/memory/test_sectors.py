"""The HSG sector classifier: OpenMemory's scores, primary, additional sectors and confidence."""

from __future__ import annotations

import random
import re

import pytest

from shared.memory import sectors
from shared.memory.sectors import SECTOR_CONFIGS, SECTORS, Classification, classify, validate_sector


def test_sector_configs_carry_the_seed_rates_and_weights():
    rates = {name: (cfg.decay_lambda, cfg.weight) for name, cfg in SECTOR_CONFIGS.items()}
    assert rates == {
        "episodic": (0.015, 1.2),
        "semantic": (0.005, 1.0),
        "procedural": (0.008, 1.1),
        "emotional": (0.020, 1.3),
        "reflective": (0.001, 0.8),
    }
    assert tuple(SECTOR_CONFIGS) == SECTORS
    assert all(cfg.name == name and cfg.patterns and cfg.description for name, cfg in SECTOR_CONFIGS.items())


def test_feeling_today_is_emotional_with_episodic_additional():
    result = classify("I feel so happy today")
    # emotional: "feel" + "happy" = 2 × 1.3; episodic: "today" = 1 × 1.2
    assert result.scores["emotional"] == pytest.approx(2.6)
    assert result.scores["episodic"] == pytest.approx(1.2)
    assert result.primary == "emotional"
    assert result.additional == ("episodic",)
    assert result.sectors == ("emotional", "episodic")
    assert result.confidence == pytest.approx(2.6 / (2.6 + 1.2 + 1))


def test_seed_first_patterns_pick_their_sector():
    assert classify("Remember when we went to Paris yesterday?").primary == "episodic"
    assert classify("Define entropy: the meaning of disorder").primary == "semantic"
    assert classify("How to install it, step by step").primary == "procedural"
    assert classify("I was angry and sad").primary == "emotional"
    assert classify("A sudden insight: I realize it now").primary == "reflective"


def test_every_occurrence_counts():
    result = classify("happy happy happy")
    assert result.scores["emotional"] == pytest.approx(3 * 1.3)
    assert result.confidence == pytest.approx(3.9 / (3.9 + 0 + 1))


def test_additional_sector_needs_a_score_of_at_least_one():
    result = classify("I think I feel happy")
    # reflective scores 0.8 ("think"): above 30% of 2.6 but below the floor of 1
    assert result.scores["reflective"] == pytest.approx(0.8)
    assert result.primary == "emotional"
    assert result.additional == ()
    assert result.confidence == pytest.approx(2.6 / (2.6 + 0.8 + 1))


def test_additional_sector_needs_thirty_percent_of_the_primary():
    text = "How to install: first run setup, then configure, then build and deploy. I feel fine."
    result = classify(text)
    assert result.primary == "procedural"
    assert result.scores["emotional"] == pytest.approx(1.3)
    assert result.scores["emotional"] < 0.3 * result.scores["procedural"]
    assert "emotional" not in result.additional


def test_ties_break_in_sector_order():
    # semantic 4 × 1.0 and reflective 5 × 0.8 both score 4.0; semantic comes first in SECTORS
    result = classify("fact data evidence proof. insight pattern lesson feedback improve")
    assert result.scores["semantic"] == result.scores["reflective"] == 4.0
    assert result.primary == "semantic"
    assert result.additional == ("reflective",)
    assert result.confidence == pytest.approx(4 / 9)


def test_no_match_falls_back_to_the_default_with_low_confidence():
    assert classify("xyz qqq") == Classification("semantic", (), 0.2, dict.fromkeys(SECTORS, 0.0))
    assert classify("", default_sector="episodic").primary == "episodic"


def test_unknown_default_sector_is_refused():
    with pytest.raises(ValueError, match="unknown sector"):
        classify("hello", default_sector="musical")


def test_im_going_to_is_episodic():
    assert classify("I'm going to Rome").scores["episodic"] == pytest.approx(1.2)


def test_matching_ignores_case():
    assert classify("TODAY I FEEL HAPPY").sectors == ("emotional", "episodic")


def test_validate_sector():
    assert validate_sector("reflective") == "reflective"
    with pytest.raises(ValueError, match="episodic, semantic, procedural, emotional, reflective"):
        validate_sector("Episodic")


def test_patterns_match_in_any_case():
    lower = classify("yesterday i went to the concert and i was so happy, when i saw the band!!")
    upper = classify("YESTERDAY I WENT TO THE CONCERT AND I WAS SO HAPPY, WHEN I SAW THE BAND!!")
    mixed = classify("Yesterday I went to the concert and I was so Happy, when I saw the band!!")
    assert dict(lower.scores) == dict(upper.scores) == dict(mixed.scores)
    assert lower.scores["episodic"] >= 4 * SECTOR_CONFIGS["episodic"].weight  # yesterday, went, i was, when i, saw


def _tricky_texts() -> list[str]:
    """Texts built from every pattern's own words, joined by what sits at a word's edge in real text."""
    rng = random.Random(7)
    # The words as the pattern sources spell them (an optional letter both ways), not as the fast path read them.
    sources = [p.pattern for config in SECTOR_CONFIGS.values() for p in config.patterns]
    words = sorted({w for source in sources for w in re.findall(r"[a-z]+", source.replace("\\s", " ")) if len(w) > 1})
    words += [w[:-1] for w in words]
    words += ["how to", "step by step", "last week", "next year", "at 9:30", "on monday", "I'm going to", "is a"]
    words += ["defined as", "stands for", "to make", "remember when", "that time", "we were", "!!!", "!"]
    edges = [" ", "\n", ", ", ".", "_", "-", "'", "é", "ä", "2", "", "  ", "\t", "ß", "Σ", "’"]
    texts = []
    for _ in range(400):
        parts = [rng.choice(words) for _ in range(rng.randint(1, 40))]
        parts = [p.upper() if rng.random() < 0.1 else p.capitalize() if rng.random() < 0.2 else p for p in parts]
        texts.append("".join(p + rng.choice(edges) for p in parts))
    return texts


def test_counting_plain_word_patterns_from_tokens_gives_the_regular_expressions_counts() -> None:
    assert sum(len(c.word_sets) for c in SECTOR_CONFIGS.values()) >= 20  # most patterns take the fast path
    for text in _tricky_texts():
        lowered = text.lower()
        words = sectors.Counter(sectors._WORD.findall(lowered))
        for config in SECTOR_CONFIGS.values():
            fast, reference = sectors._score(lowered, words, config), sectors._score_by_patterns(lowered, config)
            assert fast == reference, (text, config.name)
