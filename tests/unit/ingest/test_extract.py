"""Every document format yields ordered, typed elements with their metadata, or a clear error."""

from __future__ import annotations

from pathlib import Path

import docx
import pytest

from shared.errors import ExtractionFailed, UnsupportedMedia
from shared.ingest import Extracted, Format, extract, extract_document
from tests.unit.ingest import samples


def kinds(extracted: Extracted) -> list[str]:
    return [element.kind for element in extracted.elements]


def test_pdf_gives_one_element_per_page_with_page_numbers(tmp_path: Path) -> None:
    extracted = extract_document(samples.pdf(tmp_path / "report.pdf", pages=3), "application/pdf")
    assert extracted.format is Format.PDF
    assert [e.metadata["page_number"] for e in extracted.elements] == [1, 2, 3]
    assert all(e.text.startswith(f"Page {n}, paragraph 1.") for n, e in enumerate(extracted.elements, 1))
    assert extracted.metadata["page_count"] == 3


def test_a_pdf_without_a_text_layer_is_refused_as_such(tmp_path: Path) -> None:
    with pytest.raises(ExtractionFailed, match=r"1 page\(s\) but no extractable text .*OCR is not supported"):
        extract_document(samples.image_only_pdf(tmp_path / "scan.pdf"))


def test_a_corrupt_pdf_is_a_clear_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog >> garbage without xref or trailer")
    with pytest.raises(ExtractionFailed, match="not a readable PDF") as caught:
        extract_document(broken)
    assert caught.value.status_code == 422


def test_a_truncated_pdf_keeps_what_is_readable_or_fails_clearly(tmp_path: Path) -> None:
    whole = samples.pdf(tmp_path / "whole.pdf", pages=2).read_bytes()
    cut = tmp_path / "cut.pdf"
    cut.write_bytes(whole[: len(whole) // 3])
    with pytest.raises(ExtractionFailed):
        extract_document(cut)


def test_docx_keeps_titles_list_items_tables_and_structure(tmp_path: Path) -> None:
    extracted = extract_document(samples.docx_file(tmp_path / "report.docx", sections=2))
    assert kinds(extracted) == [
        "Title",
        "Title",
        "NarrativeText",
        "ListItem",
        "Title",
        "NarrativeText",
        "ListItem",
        "Table",
    ]
    assert extracted.elements[0].text == "Annual Report"
    assert extracted.metadata["title"] == "Annual Report"
    table = extracted.elements[-1]
    assert "<table>" in table.metadata["text_as_html"] and "214" in table.text
    assert table.text.splitlines() == ["Year | Pairs", "2020 | 214"]
    assert [e.metadata.get("category_depth") for e in extracted.elements[:2]] == [0, 1]  # Heading 1, Heading 2
    assert "filename" not in extracted.elements[2].metadata and "file_directory" not in extracted.elements[2].metadata


def test_pptx_gives_slides_as_pages(tmp_path: Path) -> None:
    extracted = extract_document(samples.pptx_file(tmp_path / "deck.pptx"))
    assert [(e.kind, e.text, e.metadata["page_number"]) for e in extracted.elements] == [
        ("Title", "Slide 1", 1),
        ("NarrativeText", "Herons return in spring.", 1),
        ("Title", "Slide 2", 2),
        # unstructured's heuristics take a short verb-less-looking line for a title; its call, kept as is
        ("Title", "Two hundred pairs nest here.", 2),
    ]


def test_xlsx_gives_a_table_per_sheet_named_by_sheet(tmp_path: Path) -> None:
    extracted = extract_document(samples.xlsx_file(tmp_path / "counts.xlsx"))
    tables = [e for e in extracted.elements if e.kind == "Table"]
    assert [t.metadata["page_name"] for t in tables] == ["Counts", "Sites"]
    assert "214" in tables[0].text and "Old mill" in tables[1].text


@pytest.mark.parametrize("to", ["epub", "odt"])
def test_epub_and_odt_work_offline_with_the_bundled_pandoc(tmp_path: Path, to: str) -> None:
    extracted = extract_document(samples.pandoc_file(tmp_path / f"guide.{to}", to))
    texts = [e.text for e in extracted.elements]
    assert "Field Guide" in texts and "Identification" in texts
    assert any("wading birds" in t for t in texts)


def test_email_gives_body_and_headers(tmp_path: Path) -> None:
    extracted = extract_document(samples.eml_file(tmp_path / "count.eml"), "message/rfc822")
    assert any("starts at nine at the old mill" in e.text for e in extracted.elements)
    assert extracted.metadata["subject"] == "Heron count on Saturday"
    assert extracted.metadata["sent_from"] == ["warden@example.org"]


def test_html_keeps_the_article_and_drops_navigation_and_footer(tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    page.write_text(samples.ARTICLE_HTML)
    extracted = extract_document(page, "text/html", source_url="https://birds.example/herons")
    text = extracted.text
    assert "grey herons return to the marshes" in text and "two hundred pairs" in text
    for boilerplate in ("About us", "Shop our store", "newsletter", "Cookie settings", "All rights reserved"):
        assert boilerplate not in text
    assert ("Title", "The Heron Migration") in [(e.kind, e.text) for e in extracted.elements]
    assert ("ListItem", "Eggs are laid in March.") in [(e.kind, e.text) for e in extracted.elements]
    assert extracted.metadata["title"] == "The Heron Migration"
    assert extracted.metadata["source_url"] == "https://birds.example/herons"


def test_markdown_structure_becomes_element_types(tmp_path: Path) -> None:
    guide = tmp_path / "guide.md"
    guide.write_text(samples.MARKDOWN)
    extracted = extract_document(guide)
    assert extracted.format is Format.MARKDOWN
    assert kinds(extracted)[:3] == ["Title", "NarrativeText", "Title"]
    assert [e.text for e in extracted.elements if e.kind == "ListItem"] == [
        "Grey plumage on the back",
        "A black stripe above the eye",
    ]


def test_plain_text_paragraphs_are_elements(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text(samples.PLAIN_TEXT)
    extracted = extract_document(notes, "text/plain")
    assert extracted.format is Format.TEXT
    assert len(extracted.elements) == 3
    assert "forty herons" in extracted.elements[1].text


def test_a_document_without_text_is_an_error_not_an_empty_result(tmp_path: Path) -> None:
    empty = tmp_path / "empty.docx"
    docx.Document().save(str(empty))
    with pytest.raises(ExtractionFailed, match="no text found in this docx document"):
        extract_document(empty)


def test_html_without_content_is_an_error(tmp_path: Path) -> None:
    page = tmp_path / "blank.html"
    page.write_text("<html><head><title>t</title></head><body><div>   </div><script>var x = 1;</script></body></html>")
    with pytest.raises(ExtractionFailed):
        extract(page, Format.HTML)


def test_mislabelled_uploads_are_refused_before_parsing(tmp_path: Path) -> None:
    report = samples.docx_file(tmp_path / "report.pdf")
    with pytest.raises(UnsupportedMedia, match="declared as application/pdf but the content is docx"):
        extract_document(report, "application/pdf")


def test_docx_light_path_reads_numbering_title_style_and_merged_cells_once(tmp_path: Path) -> None:
    document = docx.Document()
    document.add_paragraph("Heron Survey", style="Title")
    document.add_paragraph("Counted at dawn.", style="List Number")
    document.add_paragraph("A plain closing paragraph about the colony.")
    table = document.add_table(rows=2, cols=3)
    table.cell(0, 0).merge(table.cell(0, 1)).text = "Site"
    table.cell(0, 2).text = "Pairs"
    for cell, value in zip(table.rows[1].cells, ("Mill", "0", "0"), strict=True):
        cell.text = value
    path = tmp_path / "survey.docx"
    document.save(str(path))
    extracted = extract_document(path)
    assert [(e.kind, e.text) for e in extracted.elements] == [
        ("Title", "Heron Survey"),
        ("ListItem", "Counted at dawn."),
        ("NarrativeText", "A plain closing paragraph about the colony."),
        ("Table", "Site | Pairs\nMill | 0 | 0"),  # the merged cell once; equal neighbours both kept
    ]
    assert extracted.metadata["title"] == "Heron Survey"
