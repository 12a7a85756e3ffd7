"""What one document may become (MNEMOFLOW_INGEST_MAX_CHARS, MNEMOFLOW_INGEST_MAX_CHUNKS): each parser and the
chunker stop at the limit, before the rest of the document is read or cut, and say which limit it was."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from shared.errors import ExtractionFailed, InvalidInput
from shared.ingest import Element, Format, Limits, chunk_elements, extract
from shared.ingest.elements import TextBudget
from shared.ingest.parsers import _parse_pdf
from tests.unit.ingest import samples

MIB = 1024 * 1024


def test_a_budget_counts_characters_and_refuses_past_its_limit():
    budget = TextBudget(10)
    budget.take(4)
    budget.take(6)  # at the limit is within it
    with pytest.raises(ExtractionFailed) as refused:
        budget.take(1)
    assert refused.value.status_code == 422
    assert "more than 10 characters of text, the limit per document (MNEMOFLOW_INGEST_MAX_CHARS)" in str(refused.value)
    assert refused.value.details == {"limit": "chars", "max_chars": 10}
    unlimited = TextBudget(None)
    unlimited.take(10**12)


def test_the_pdf_parser_stops_at_the_page_that_passes_the_limit(tmp_path):
    bomb = samples.text_bomb_pdf(tmp_path / "bomb.pdf", pages=50)  # ~40 million characters in ~10 KB
    assert bomb.stat().st_size < 64 * 1024
    budget = TextBudget(1_000_000)
    with pytest.raises(ExtractionFailed, match="MNEMOFLOW_INGEST_MAX_CHARS"):
        _parse_pdf(str(bomb), budget)
    assert 1_000_000 < budget.used < 2_000_000  # two pages of fifty read


def test_a_pdf_bomb_is_refused_for_its_text_long_before_the_parsers_time_limit(tmp_path):
    # Read whole, these 300 pages (240 million characters) take minutes; the limit stops the parser at page 2.
    bomb = samples.text_bomb_pdf(tmp_path / "bomb.pdf", pages=300)
    with pytest.raises(ExtractionFailed, match=r"pdf document: the document holds more than 1,000,000 characters"):
        extract(bomb, Format.PDF, limits=Limits(timeout_s=60), max_chars=1_000_000)
    assert len(extract(samples.pdf(tmp_path / "small.pdf", pages=3), Format.PDF, max_chars=1_000).elements) == 3


@pytest.mark.parametrize(
    ("make", "fmt"),
    [
        (lambda d: samples.docx_file(d / "a.docx", sections=6), Format.DOCX),
        (lambda d: _write(d / "a.html", samples.ARTICLE_HTML * 3), Format.HTML),
        (lambda d: _write(d / "a.md", samples.MARKDOWN * 20), Format.MARKDOWN),
    ],
)
def test_every_document_parser_keeps_to_the_limit(tmp_path, make, fmt):
    path = make(tmp_path)
    whole = extract(path, fmt)
    chars = sum(len(e.text) for e in whole.elements)
    assert chars > 200
    assert extract(path, fmt, max_chars=chars * 2).elements == whole.elements
    with pytest.raises(ExtractionFailed, match=r"more than 100 characters of text.*MNEMOFLOW_INGEST_MAX_CHARS"):
        extract(path, fmt, max_chars=100)


def test_a_transcript_keeps_to_the_limit(speech_wav: Path):
    with pytest.raises(ExtractionFailed, match=r"wav audio: the document holds more than 20 characters"):
        extract(speech_wav, Format.WAV, max_chars=20)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


class _Tripwire(Sequence[Element]):
    """Elements that fail the test if the chunker reads past `stop`."""

    def __init__(self, elements: list[Element], stop: int) -> None:
        self.elements, self.stop = elements, stop

    def __len__(self) -> int:
        return len(self.elements)

    def __getitem__(self, index):  # type: ignore[override]
        return self.elements[index]

    def __iter__(self) -> Iterator[Element]:
        for position, element in enumerate(self.elements):
            assert position < self.stop, "the chunker read past the limit"
            yield element


def _paragraphs(count: int, words: int = 50) -> list[Element]:
    return [Element(" ".join(f"p{n}w{i}" for i in range(words)), "NarrativeText") for n in range(count)]


def test_the_chunker_stops_at_the_element_that_passes_the_character_limit():
    elements = _paragraphs(1000)  # ~300 characters each
    with pytest.raises(InvalidInput, match=r"more than 3,000 characters of text.*MNEMOFLOW_INGEST_MAX_CHARS"):
        chunk_elements(_Tripwire(elements, stop=20), chunk_size=200, chunk_overlap=20, max_chars=3_000)


def test_the_chunker_stops_at_the_chunk_past_the_chunk_limit_and_names_the_chunk_size():
    elements = _paragraphs(1000)
    exact = chunk_elements(elements[:40], chunk_size=200, chunk_overlap=0)
    assert chunk_elements(elements[:40], chunk_size=200, chunk_overlap=0, max_chunks=len(exact)) == exact
    with pytest.raises(InvalidInput) as refused:
        chunk_elements(elements[:40], chunk_size=200, chunk_overlap=0, max_chunks=len(exact) - 1)
    message = str(refused.value)
    assert f"more than {len(exact) - 1} chunks of 200 tokens" in message and "MNEMOFLOW_INGEST_MAX_CHUNKS" in message
    assert "config.chunk_size" in message
    with pytest.raises(InvalidInput, match="MNEMOFLOW_INGEST_MAX_CHUNKS"):
        chunk_elements(_Tripwire(elements, stop=len(exact) + 5), chunk_size=200, chunk_overlap=0, max_chunks=10)


def test_one_huge_element_is_cut_only_as_far_as_the_chunk_limit():
    # 20 million characters in one element, in chunks of 16 tokens: ~1.25 million windows if cut whole.
    huge = [Element(("word " * 4_000_000).strip(), "NarrativeText")]
    tracemalloc.start()
    try:
        with pytest.raises(InvalidInput, match="more than 100 chunks of 16 tokens"):
            chunk_elements(huge, chunk_size=16, chunk_overlap=0, max_chunks=100)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * MIB  # the windows and words of the rest are never built


def test_an_overlap_near_the_chunk_size_cannot_repeat_the_text_without_bound():
    elements = _paragraphs(200)  # ~60,000 characters
    chunk_elements(elements, chunk_size=400, chunk_overlap=50, max_chars=100_000)  # ~1.1x the text: fine
    with pytest.raises(InvalidInput, match=r"more than 200,000 characters.*config\.chunk_overlap"):
        chunk_elements(elements, chunk_size=400, chunk_overlap=390, max_chars=100_000)
