"""The parser an install without the `documents` extra reads plain text and Markdown with (shared/ingest/plaintext.py):
the element kinds chunking needs, the structure the unstructured-based tests expect of the same samples."""

from __future__ import annotations

import pytest

from shared.errors import ExtractionFailed
from shared.ingest import chunk_elements
from shared.ingest.elements import TextBudget
from shared.ingest.plaintext import partition_markdown, partition_text
from tests.unit.ingest import samples


def test_markdown_structure_becomes_element_types() -> None:
    elements = partition_markdown(samples.MARKDOWN)
    assert [e.kind for e in elements][:3] == ["Title", "NarrativeText", "Title"]
    assert [(e.text, e.metadata["category_depth"]) for e in elements if e.kind == "Title"] == [
        ("Field Guide", 0),
        ("Identification", 1),
    ]
    assert [e.text for e in elements if e.kind == "ListItem"] == [
        "Grey plumage on the back",
        "A black stripe above the eye",
    ]
    assert elements[-1].text == "See the society for more."  # the link's text, not its markup


def test_markdown_tables_code_quotes_and_setext_headings() -> None:
    text = (
        "Heron facts\n===========\n\n| bird | pairs |\n|---|---:|\n| grey heron | 200 |\n| *egret* | 12 |\n\n"
        "```python\nprint('**not** emphasis')\n```\n\n> Herons hunt\n> at dawn.\n\n1. first\n2. second\n\n"
        "A snake_case_name and **bold** and `code` stay readable.\n"
    )
    elements = partition_markdown(text)
    assert [e.kind for e in elements] == [
        "Title", "Table", "CodeSnippet", "NarrativeText", "ListItem", "ListItem", "NarrativeText",
    ]  # fmt: skip
    assert elements[1].text == "bird | pairs\ngrey heron | 200\negret | 12"
    assert elements[2].text == "print('**not** emphasis')"
    assert elements[3].text == "Herons hunt at dawn."
    assert elements[-1].text == "A snake_case_name and bold and code stay readable."


def test_plain_text_paragraphs_are_elements() -> None:
    elements = partition_text(samples.PLAIN_TEXT)
    assert len(elements) == 3
    assert "forty herons" in elements[1].text
    assert {e.kind for e in elements} == {"NarrativeText"}
    assert [e.text for e in partition_text("Shopping:\n\n- eggs\n- bread\n")] == ["Shopping:", "eggs", "bread"]


def test_a_title_starts_a_section_when_chunked() -> None:
    body = "Herons wade in shallow water and wait for fish. " * 20
    chunks = chunk_elements(
        partition_markdown(f"# One\n\n{body}\n\n# Two\n\n{body}\n"), chunk_size=400, chunk_overlap=0
    )
    second = next(c for c in chunks if c.text.startswith("Two"))
    assert second.metadata["headings"] == ["Two"]
    assert chunks[0].metadata["headings"] == ["One"]


def test_the_text_budget_is_enforced() -> None:
    with pytest.raises(ExtractionFailed, match="MNEMOFLOW_INGEST_MAX_CHARS"):
        partition_text("word " * 100, TextBudget(50))
