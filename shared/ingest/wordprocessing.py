"""DOCX as elements with python-docx alone: the light path for Word documents (no layout model, no spaCy).

Body paragraphs and tables in reading order. A paragraph styled Title or Heading N is a Title (`category_depth`
N - 1, which chunking reads to start a section); a list-styled or numbered paragraph is a ListItem; any other
paragraph is NarrativeText (no guessing of titles from short lines, as unstructured's heuristics do); a table
is one Table element, its rows as `cell | cell` lines and `text_as_html` beside. Headers, footers and comments
are left out: they repeat on every page and are rarely what a reader asks about.

Runs inside the parser sandbox (python-docx parses with lxml, entities unresolved); `budget` stops it once the
text passes the limit.
"""

from __future__ import annotations

import html
from typing import Any

from shared.ingest.elements import Element, TextBudget

_HEADING = "Heading "
_LIST_STYLES = ("List", "list")


def partition_docx(path: str, budget: TextBudget | None = None) -> tuple[list[Element], dict[str, Any]]:
    """The document's elements in reading order, and its core properties (title, author, subject) that are set."""
    import docx
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    document = docx.Document(path)
    # Style names by id, looked up once: python-docx's paragraph.style searches the styles part on every call,
    # which doubled the parse time of a typical report.
    names = {style.style_id: style.name or "" for style in document.styles}
    elements: list[Element] = []
    for block in document.iter_inner_content():
        if isinstance(block, Paragraph):
            element = _paragraph(block, names)
        elif isinstance(block, Table):
            element = _table(block)
        else:  # pragma: no cover - python-docx yields only these two
            continue
        if element is None:
            continue
        if budget is not None:
            budget.take(len(element.text))
        elements.append(element)
    properties = document.core_properties
    metadata = {
        key: value
        for key, value in (("title", properties.title), ("author", properties.author), ("subject", properties.subject))
        if isinstance(value, str) and value.strip()
    }
    return elements, metadata


def _paragraph(paragraph: Any, names: dict[str, str]) -> Element | None:
    text = paragraph.text.strip()
    if not text:
        return None
    style_id = paragraph._p.style
    style = names.get(style_id, "") if style_id else ""
    if style == "Title":
        return Element(text=text, kind="Title", metadata={"category_depth": 0})
    if style.startswith(_HEADING) and style[len(_HEADING) :].isdigit():
        return Element(text=text, kind="Title", metadata={"category_depth": int(style[len(_HEADING) :]) - 1})
    numbered = paragraph._p.pPr is not None and paragraph._p.pPr.numPr is not None
    if numbered or style.startswith(_LIST_STYLES):
        return Element(text=text, kind="ListItem", metadata={"category_depth": 1})
    return Element(text=text, kind="NarrativeText")


def _table(table: Any) -> Element | None:
    rows = []
    for row in table.rows:
        cells: list[str] = []
        previous = None
        for cell in row.cells:
            if cell._tc is previous:  # a merged cell comes back once for every column it spans
                continue
            previous = cell._tc
            cells.append(" ".join(cell.text.split()))
        if any(cells):
            rows.append(cells)
    if not rows:
        return None
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    text = "\n".join(" | ".join(row) for row in rows)
    return Element(text=text, kind="Table", metadata={"text_as_html": f"<table>{body}</table>"})
