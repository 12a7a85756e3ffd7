"""Turn a file of a known format into elements, in a confined, limited child of its own (sandbox.py)."""

from __future__ import annotations

import os

from shared.ingest import extras
from shared.ingest.audio import transcribe
from shared.ingest.elements import Extracted
from shared.ingest.formats import Format, Kind
from shared.ingest.parsers import parse_document
from shared.ingest.sandbox import DOCUMENT_LIMITS, MEDIA_LIMITS, Limits, run_on_file


def extract(
    path: str | os.PathLike[str],
    fmt: Format,
    *,
    limits: Limits | None = None,
    source_url: str | None = None,
    max_chars: int | None = None,
) -> Extracted:
    """Elements and metadata of the file at `path`, already sniffed as `fmt`.

    Documents are parsed (the light path: pypdfium2 for PDF, trafilatura for HTML, python-docx for DOCX, a line
    parser for plain text and Markdown; unstructured for the other office formats, EPUB and e-mail); audio and
    video are transcribed. `limits` defaults to DOCUMENT_LIMITS or MEDIA_LIMITS by kind.
    `source_url` is recorded for HTML fetched from the web. Raises ExtractionFailed when there is no text, or
    more than `max_chars` characters of it: the parser stops there, so no more than that comes back; UnsupportedMedia
    naming the extra to install when this install lacks the format's parser (shared/ingest/extras.py).
    """
    extras.require(fmt)
    location = os.fspath(path)
    label = f"{fmt.value} {fmt.kind.value}"
    if fmt.kind is Kind.DOCUMENT:
        return run_on_file(label, limits or DOCUMENT_LIMITS, parse_document, location, fmt, source_url, max_chars)
    return run_on_file(label, limits or MEDIA_LIMITS, transcribe, location, fmt, max_chars)
