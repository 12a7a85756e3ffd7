"""What extraction returns: an ordered list of typed text elements and the document's own metadata."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared.ingest.formats import Format


@dataclass(frozen=True, slots=True)
class Element:
    """One piece of a document in reading order.

    `kind` follows unstructured's element categories (Title, NarrativeText, ListItem, Table, Text, …),
    plus `Transcript` for a speech segment; `metadata` holds page_number, category_depth, parent_id,
    text_as_html, start/end seconds, … — whatever the parser knew about this piece.
    """

    text: str
    kind: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Extracted:
    """A parsed document: its format, its elements in order (never empty) and document-level metadata."""

    format: Format
    elements: list[Element]
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """All element texts, one blank line apart (for callers that want the plain text)."""
        return "\n\n".join(element.text for element in self.elements)
