"""What extraction returns: an ordered list of typed text elements and the document's own metadata."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared.errors import ExtractionFailed
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


def too_much_text(max_chars: int) -> ExtractionFailed:
    """The error of a document whose text passes MNEMOFLOW_INGEST_MAX_CHARS."""
    return ExtractionFailed(
        f"the document holds more than {max_chars:,} characters of text, the limit per document "
        "(MNEMOFLOW_INGEST_MAX_CHARS): split it into smaller documents, or raise the limit",
        details={"limit": "chars", "max_chars": max_chars},
    )


class TextBudget:
    """The characters of text one document may yield. A parser takes from it as it goes, so a document past the
    limit stops its parser there instead of being extracted whole and cut afterwards."""

    def __init__(self, max_chars: int | None) -> None:
        self.max_chars = max_chars
        self.used = 0

    def take(self, chars: int) -> None:
        """Count `chars` more characters; ExtractionFailed once past the limit."""
        self.used += chars
        if self.max_chars is not None and self.used > self.max_chars:
            raise too_much_text(self.max_chars)
