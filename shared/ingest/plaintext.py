"""Plain text, Markdown, and HTML main content (trafilatura renders it as Markdown) as elements, without unstructured.

It gives the element kinds unstructured gives for the same structure (Title with `category_depth`, NarrativeText,
ListItem, Table, CodeSnippet), which is what chunking reads (a Title starts a section); it does not guess titles in
plain text, as unstructured's heuristics do. Pure: string in, elements out.
"""

from __future__ import annotations

import re

from shared.ingest.elements import Element, TextBudget

_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```+|~~~+)")
_BULLET = re.compile(r"^[ \t]*(?:[-*+•]|\d{1,9}[.)])[ \t]+(.*)$")
_TABLE_RULE = re.compile(r"^\|?[ \t]*:?-{3,}:?[ \t]*(\|[ \t]*:?-{3,}:?[ \t]*)*\|?[ \t]*$")
_QUOTE = re.compile(r"^ {0,3}>[ \t]?")
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_EMPHASIS = re.compile(r"(?<!\w)(\*\*|__|\*|_|~~)(\S(?:.*?\S)?)\1(?!\w)")
_CODE_SPAN = re.compile(r"`([^`]+)`")


def partition_text(text: str, budget: TextBudget | None = None) -> list[Element]:
    """Paragraphs (blank-line separated) as NarrativeText, bulleted or numbered lines as ListItem."""
    elements: list[Element] = []
    for block in _blocks(text.splitlines()):
        items = [_BULLET.match(line) for line in block]
        if all(items):
            elements += [Element(text=m.group(1).strip(), kind="ListItem") for m in items if m]
        else:
            elements.append(Element(text=" ".join(line.strip() for line in block), kind="NarrativeText"))
    return _taken(elements, budget)


def partition_markdown(text: str, budget: TextBudget | None = None) -> list[Element]:
    """Headings, paragraphs, list items, tables, fenced code and quotes, with the inline markup removed."""
    elements: list[Element] = []
    lines = text.splitlines()
    index = 0
    paragraph: list[str] = []

    def close_paragraph() -> None:
        if paragraph:
            elements.append(Element(text=_inline(" ".join(paragraph)), kind="NarrativeText"))
            paragraph.clear()

    while index < len(lines):
        line = lines[index]
        stripped = line.strip()
        fence = _FENCE.match(line)
        if fence:
            close_paragraph()
            end = next((j for j in range(index + 1, len(lines)) if lines[j].strip().startswith(fence.group(1))), None)
            body = lines[index + 1 : end if end is not None else len(lines)]
            elements.append(Element(text="\n".join(body).strip(), kind="CodeSnippet"))
            index = (end if end is not None else len(lines)) + 1
            continue
        heading = _ATX.match(line)
        if heading:
            close_paragraph()
            elements.append(_title(heading.group(2), len(heading.group(1))))
        elif paragraph and len(paragraph) == 1 and _SETEXT.match(line) and not _BULLET.match(paragraph[0]):
            elements.append(_title(paragraph.pop(), 1 if stripped.startswith("=") else 2))
        elif not stripped:
            close_paragraph()
        elif stripped.startswith("|") and index + 1 < len(lines) and _TABLE_RULE.match(lines[index + 1].strip()):
            close_paragraph()
            rows = [stripped]
            index += 2  # the header, then its rule
            while index < len(lines) and lines[index].strip().startswith("|"):
                rows.append(lines[index].strip())
                index += 1
            elements.append(Element(text="\n".join(_row(r) for r in rows), kind="Table"))
            continue
        elif _BULLET.match(line):
            close_paragraph()
            item = _BULLET.match(line)
            assert item is not None
            elements.append(Element(text=_inline(item.group(1)), kind="ListItem", metadata={"category_depth": 1}))
        elif _QUOTE.match(line):
            close_paragraph()
            quoted = []
            while index < len(lines) and _QUOTE.match(lines[index]):
                quoted.append(_QUOTE.sub("", lines[index], count=1).strip())
                index += 1
            elements.append(Element(text=_inline(" ".join(q for q in quoted if q)), kind="NarrativeText"))
            continue
        else:
            paragraph.append(stripped)
        index += 1
    close_paragraph()
    return _taken([e for e in elements if e.text], budget)


def _blocks(lines: list[str]) -> list[list[str]]:
    blocks: list[list[str]] = [[]]
    for line in lines:
        if line.strip():
            blocks[-1].append(line)
        elif blocks[-1]:
            blocks.append([])
    return [block for block in blocks if block]


def _title(text: str, level: int) -> Element:
    return Element(text=_inline(text), kind="Title", metadata={"category_depth": level - 1})


def _row(line: str) -> str:
    cells = [_inline(cell.strip()) for cell in line.strip().strip("|").split("|")]
    return " | ".join(cells)


def _inline(text: str) -> str:
    """Markdown's inline markup removed: images, links (their text kept), emphasis and code spans."""
    text = _IMAGE.sub(r"\1", text)
    text = _LINK.sub(r"\1", text)
    text = _CODE_SPAN.sub(r"\1", text)
    for _ in range(2):  # nested emphasis (***both***)
        text = _EMPHASIS.sub(r"\2", text)
    return text.strip()


def _taken(elements: list[Element], budget: TextBudget | None) -> list[Element]:
    if budget is not None:
        for element in elements:
            budget.take(len(element.text))
    return elements
