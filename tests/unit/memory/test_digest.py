"""Extractive digests: shared terms, representative memories, a user summary that names what the memories say."""

from __future__ import annotations

from shared.memory.digest import (
    NO_MEMORIES,
    MemoryLine,
    SummaryParams,
    cut,
    representatives,
    similarity,
    summarize,
    terms,
    top_terms,
)


def line(i: int, content: str, sector: str = "semantic", salience: float = 0.5) -> MemoryLine:
    return MemoryLine(f"m{i}", content, sector, salience)


def test_terms_leave_out_stopwords_numbers_and_short_words():
    assert terms("The 2 cats of Ana are in the garden, and Ana's cat sleeps") == {
        "cats",
        "ana",
        "garden",
        "ana's",
        "cat",
        "sleeps",
    }
    assert terms("it is a") == frozenset()


def test_top_terms_are_the_ones_most_memories_share_weighted_by_salience():
    docs = [
        (terms("green tea in the morning"), 0.2),
        (terms("green tea with honey"), 0.2),
        (terms("black coffee at noon"), 0.9),
    ]
    assert top_terms(docs, 2) == ["green", "tea"]  # in two memories beats one salient memory
    assert top_terms(docs, 3)[2] in {"black", "coffee", "noon"}  # then the salient memory's words
    assert top_terms([], 5) == []
    assert top_terms(docs, 5, min_documents=2) == ["green", "tea"]


def test_a_representative_memory_is_salient_and_central_and_near_copies_are_passed_over():
    group = [
        line(0, "Alice prefers green tea in the morning", salience=0.5),
        line(1, "Alice prefers green tea in the mornings", salience=0.6),  # a near-copy of the first
        line(2, "Alice drinks green tea at work", salience=0.5),
        line(3, "The bus to the airport leaves at nine", salience=0.5),  # shares nothing with the group
    ]
    picked = representatives(group, 2)
    assert [m.id for m in picked] == ["m1", "m2"]  # m0 is too similar to m1; m3 is off the group's topic
    assert [m.id for m in representatives(group, 3, similar=1.0)][:2] == ["m1", "m0"]  # copies allowed
    assert representatives(group, 0) == [] and representatives([], 3) == []


def test_similarity_is_jaccard_of_terms():
    assert similarity(frozenset({"a", "b"}), frozenset({"b", "c"})) == 1 / 3
    assert similarity(frozenset(), frozenset({"a"})) == 0.0


def test_a_summary_names_counts_top_terms_and_each_sector_s_representative_memories():
    lines = [
        line(0, "Alice prefers green tea in the morning", "semantic", 0.7),
        line(1, "Alice is allergic to peanuts", "semantic", 0.4),
        line(2, "Yesterday Alice met Bruno at the harbour", "episodic", 0.5),
        line(3, "Alice felt proud after the marathon", "emotional", 0.5),
        line(4, "Looking back, Alice learned to rest before a race", "reflective", 0.5),
    ]
    counts = {"semantic": 12, "episodic": 1, "emotional": 1, "reflective": 1}  # all of them: more than were read
    digest = summarize(lines, counts, SummaryParams(highlights=1, terms=3))
    assert digest.memory_count == 15 and digest.reflection_count == 1
    assert [s.sector for s in digest.sectors] == ["semantic", "episodic", "emotional", "reflective"]
    assert [h.id for h in digest.sectors[0].highlights] == ["m0"]  # the more salient of the two
    assert digest.top_terms[0] == "alice"
    assert digest.text.splitlines() == [
        "15 memories (semantic 12, episodic 1, emotional 1, reflective 1).",
        f"Top terms: {', '.join(digest.top_terms)}.",
        'semantic: "Alice prefers green tea in the morning"',
        'episodic: "Yesterday Alice met Bruno at the harbour"',
        'emotional: "Alice felt proud after the marathon"',
        'reflective: "Looking back, Alice learned to rest before a race"',
    ]


def test_a_summary_of_nothing_says_so_and_a_long_memory_is_cut_to_a_line():
    assert summarize([], {}, SummaryParams()).text == NO_MEMORIES
    long = "word " * 100
    digest = summarize([line(0, long)], {"semantic": 1}, SummaryParams(line_chars=40))
    (highlight,) = digest.sectors[0].highlights
    assert len(highlight.content) == 40 and highlight.content.endswith("...")
    assert cut("two\nlines", 40) == "two lines"
    assert digest.text.startswith("1 memory (semantic 1).")
