"""Chunks respect the token budget, overlap across cuts, start at headings and say where they came from."""

from __future__ import annotations

import itertools

import pytest

from shared.errors import InvalidInput
from shared.ingest import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, Element, chunk_elements
from shared.ingest.chunking import bound_by_tokens
from shared.text import estimate_tokens, tail_by_estimate


def paragraph(n: int, words: int = 40, page: int | None = None) -> Element:
    text = " ".join(f"p{n}w{i}" for i in range(words))
    return Element(text=text, kind="NarrativeText", metadata={} if page is None else {"page_number": page})


def title(text: str, depth: int = 0) -> Element:
    return Element(text=text, kind="Title", metadata={"category_depth": depth})


def test_defaults_are_the_seed_ingestion_config() -> None:
    assert (DEFAULT_CHUNK_SIZE, DEFAULT_CHUNK_OVERLAP) == (2048, 256)


def test_a_short_document_is_one_chunk_with_its_metadata() -> None:
    elements = [title("Report"), paragraph(1, page=1), paragraph(2, page=2)]
    [chunk] = chunk_elements(elements, document_metadata={"format": "pdf", "title": "Report"})
    assert chunk.text == "\n\n".join(e.text for e in elements)
    assert chunk.tokens == estimate_tokens(chunk.text)
    assert chunk.metadata == {
        "element_range": [0, 2],
        "element_types": ["Title", "NarrativeText"],
        "headings": ["Report"],
        "overlap_tokens": 0,
        "page_numbers": [1, 2],
        "document": {"format": "pdf", "title": "Report"},
    }


def test_chunks_stay_within_the_budget_and_overlap_across_cuts() -> None:
    elements = [paragraph(n, words=30, page=n // 5 + 1) for n in range(60)]
    chunks = chunk_elements(elements, chunk_size=300, chunk_overlap=60)
    assert len(chunks) > 5
    for before, after in itertools.pairwise(chunks):
        assert after.tokens <= 300
        assert 0 < after.metadata["overlap_tokens"] <= 60
        # The next chunk opens with the end of this one: its last element whole, and a word-cut tail before it.
        assert before.text.split("\n\n")[-1] in after.text
        assert after.text.split("\n\n")[0] in before.text
    # Nothing is lost: every element's text appears in some chunk.
    joined = "\n\n".join(c.text for c in chunks)
    assert all(e.text in joined for e in elements)
    assert chunks[-1].metadata["page_numbers"][-1] == 12


def test_no_overlap_when_asked_for_none() -> None:
    chunks = chunk_elements([paragraph(n) for n in range(30)], chunk_size=200, chunk_overlap=0)
    assert all(c.metadata["overlap_tokens"] == 0 for c in chunks)
    assert "\n\n".join(c.text for c in chunks) == "\n\n".join(paragraph(n).text for n in range(30))


def test_titles_start_a_new_chunk_once_the_current_one_has_substance() -> None:
    elements = [
        title("Guide"),
        title("Intro", depth=1),
        paragraph(1, words=80),
        title("Nesting", depth=1),
        paragraph(2, words=80),
        title("Tiny", depth=1),
        paragraph(3, words=5),
        title("Last", depth=1),
        paragraph(4, words=5),
    ]
    chunks = chunk_elements(elements, chunk_size=400, chunk_overlap=50)
    assert [c.text.split("\n\n")[0] for c in chunks] == ["Guide", "Nesting", "Tiny"]
    assert [c.metadata["headings"] for c in chunks] == [["Guide", "Intro"], ["Guide", "Nesting"], ["Guide", "Tiny"]]
    assert chunks[1].metadata["overlap_tokens"] == 0  # a new section carries no tail of the previous one
    assert "Last" in chunks[2].text  # a short section is not emitted alone: the next one joins it


def test_a_heading_is_never_left_at_the_end_of_a_chunk() -> None:
    elements = [paragraph(1, words=70), title("Next part"), paragraph(2, words=70)]
    chunks = chunk_elements(elements, chunk_size=150, chunk_overlap=20)
    assert not chunks[0].text.endswith("Next part")
    assert chunks[1].text.startswith("Next part")


def test_an_oversized_element_is_split_into_overlapping_windows() -> None:
    huge = paragraph(1, words=500, page=7)
    chunks = chunk_elements([title("Appendix"), huge, paragraph(2, words=10, page=8)], chunk_size=200, chunk_overlap=40)
    assert chunks[0].text == "Appendix"
    assert all(c.tokens <= 200 for c in chunks)
    windows = [c for c in chunks if c.metadata["element_range"][0] == 1]
    assert len(windows) >= 6
    assert all(c.metadata["headings"] == ["Appendix"] for c in windows)
    assert windows[0].metadata["page_numbers"] == [7]
    assert chunks[-1].text.endswith(paragraph(2, words=10).text)  # the next small element joins the last window
    assert chunks[-1].metadata["page_numbers"] == [7, 8]


def test_transcript_chunks_carry_their_time_span() -> None:
    segments = [
        Element(
            text=f"segment {i} " + "word " * 30, kind="Transcript", metadata={"start": i * 5.0, "end": i * 5.0 + 4.5}
        )
        for i in range(20)
    ]
    chunks = chunk_elements(segments, chunk_size=120, chunk_overlap=0)
    assert chunks[0].metadata["start"] == 0.0
    assert [c.metadata["start"] for c in chunks] == sorted(c.metadata["start"] for c in chunks)
    assert chunks[-1].metadata["end"] == 99.5
    for before, after in itertools.pairwise(chunks):
        assert before.metadata["end"] < after.metadata["start"] + 5


def test_sheet_names_are_kept() -> None:
    sheets = [Element(text="Year Pairs 1990 12", kind="Table", metadata={"page_name": name}) for name in ("A", "B")]
    assert chunk_elements(sheets)[0].metadata["page_names"] == ["A", "B"]


def test_without_preserve_metadata_chunks_are_bare() -> None:
    [chunk] = chunk_elements([title("T"), paragraph(1)], preserve_metadata=False, document_metadata={"x": 1})
    assert chunk.metadata == {}


def test_cjk_text_is_budgeted_per_character() -> None:
    text = "記憶は長く残る。" * 100  # 800 CJK characters: ~800 tokens, not ~200
    chunks = chunk_elements([Element(text=text, kind="NarrativeText")], chunk_size=256, chunk_overlap=32)
    assert len(chunks) >= 4
    assert all(c.tokens <= 256 for c in chunks)


def test_empty_elements_are_skipped_and_no_elements_give_no_chunks() -> None:
    assert chunk_elements([]) == []
    assert [c.text for c in chunk_elements([Element(" ", "Text"), paragraph(1)])] == [paragraph(1).text]


def test_deterministic() -> None:
    elements = [title("T")] + [paragraph(n, words=25 + n % 7) for n in range(40)]
    assert chunk_elements(elements, chunk_size=180, chunk_overlap=30) == chunk_elements(
        elements, chunk_size=180, chunk_overlap=30
    )


@pytest.mark.parametrize(("size", "overlap"), [(0, 0), (100, 100), (100, -1)])
def test_bad_sizes_are_invalid_input(size: int, overlap: int) -> None:
    with pytest.raises(InvalidInput):
        chunk_elements([paragraph(1)], chunk_size=size, chunk_overlap=overlap)


def test_tail_by_estimate_takes_whole_words_from_the_end() -> None:
    text = "alpha beta gamma delta epsilon"
    assert tail_by_estimate(text, 100) == text
    assert tail_by_estimate(text, 5) == "delta epsilon"
    assert tail_by_estimate(text, 0) == ""
    assert tail_by_estimate("一二三四五", 2) == "四五"


def _one_token_a_character(texts) -> list[int]:
    """A tokenizer that makes a token of every character, as MiniLM does of punctuation runs."""
    return [len(t) for t in texts]


def test_a_chunk_of_punctuation_is_cut_by_the_models_tokens_not_the_estimate() -> None:
    table = Element(text="| --- | --- |\n" * 2000, kind="Table", metadata={})  # 28,000 characters: ~7,000 estimated
    prose = paragraph(9)
    chunks = chunk_elements([table, prose])
    assert max(_one_token_a_character([c.text for c in chunks])) > DEFAULT_CHUNK_SIZE  # the estimate lets it pass
    bounded = bound_by_tokens(chunks, _one_token_a_character, DEFAULT_CHUNK_SIZE)
    assert max(_one_token_a_character([c.text for c in bounded])) <= DEFAULT_CHUNK_SIZE
    assert [c.index for c in bounded] == list(range(len(bounded)))
    # nothing lost, nothing reordered: the parts read back as the document (cuts fall after whitespace)
    assert "".join(c.text.replace("\n", "").replace(" ", "") for c in bounded) == "".join(
        c.text.replace("\n", "").replace(" ", "") for c in chunks
    )
    assert bounded[-1].text.endswith(prose.text) and bounded[0].metadata == chunks[0].metadata


def test_chunks_within_the_models_tokens_are_kept_as_they_are() -> None:
    chunks = chunk_elements([paragraph(n) for n in range(300)])
    assert bound_by_tokens(chunks, lambda texts: [estimate_tokens(t) for t in texts], DEFAULT_CHUNK_SIZE) == chunks


def test_cutting_by_tokens_still_keeps_the_chunk_limit() -> None:
    chunks = chunk_elements([Element(text=">" * 40_000, kind="NarrativeText", metadata={})])
    with pytest.raises(InvalidInput, match="MNEMOFLOW_INGEST_MAX_CHUNKS"):
        bound_by_tokens(chunks, _one_token_a_character, DEFAULT_CHUNK_SIZE, max_chunks=10)
