"""Turn a file of a known format into elements, in a confined, limited child of its own (sandbox.py)."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from shared.errors import MnemoflowError
from shared.ingest import extras
from shared.ingest.answers import read_items
from shared.ingest.audio import transcribe
from shared.ingest.elements import Extracted
from shared.ingest.formats import Format, Kind
from shared.ingest.parsers import parse_document, parse_documents
from shared.ingest.sandbox import DOCUMENT_LIMITS, MEDIA_LIMITS, Limits, run_on_file, run_on_files

log = logging.getLogger(__name__)


def extract(
    path: str | os.PathLike[str],
    fmt: Format,
    *,
    limits: Limits | None = None,
    source_url: str | None = None,
    max_chars: int | None = None,
    max_media_seconds: float | None = None,
) -> Extracted:
    """Elements and metadata of the file at `path`, already sniffed as `fmt`.

    Documents are parsed (the light path: pypdfium2 for PDF, trafilatura for HTML, python-docx for DOCX, a line
    parser for plain text and Markdown; unstructured for the other office formats, EPUB and e-mail); audio and
    video are transcribed. `limits` defaults to DOCUMENT_LIMITS or MEDIA_LIMITS by kind.
    `source_url` is recorded for HTML fetched from the web. Raises ExtractionFailed when there is no text, or
    more than `max_chars` characters of it: the parser stops there, so no more than that comes back; UnsupportedMedia
    naming the extra to install when this install lacks the format's parser (shared/ingest/extras.py); audio or
    video longer than `max_media_seconds` is refused (ExtractionFailed) before it is transcribed.
    """
    extras.require(fmt)
    location = os.fspath(path)
    label = f"{fmt.value} {fmt.kind.value}"
    if fmt.kind is Kind.DOCUMENT:
        return run_on_file(label, limits or DOCUMENT_LIMITS, parse_document, location, fmt, source_url, max_chars)
    return run_on_file(label, limits or MEDIA_LIMITS, transcribe, location, fmt, max_chars, max_media_seconds)


def extract_group(
    items: Sequence[tuple[str | os.PathLike[str], Format]],
    *,
    limits: Limits | None = None,
    max_chars: int | None = None,
) -> list[Extracted | MnemoflowError]:
    """Each document's elements, or the error that fails it, for several documents of ONE tenant in one child.

    The sandbox's fork and confinement are paid once for the group, which is what makes small documents cheap;
    the caller vouches that every file is the same tenant's. The group has one document's time limit: small
    documents take milliseconds. If the child does not answer (a crash, the time limit, the answer's size cap)
    or a document's parser failed otherwise than with our own errors, those documents are extracted again alone,
    each in its own child under the full limits, where their failure is told apart as one document's is.
    """
    if not items:
        return []
    if len(items) == 1:
        return [_one(items[0], limits, max_chars)]
    for _, fmt in items:
        extras.require(fmt)
        if fmt.kind is not Kind.DOCUMENT:
            raise ValueError(f"only documents are extracted in groups, not {fmt.value}")
    paths = [os.fspath(path) for path, _ in items]
    jobs = [(fmt, max_chars) for _, fmt in items]
    try:
        label = f"group of {len(items)} documents"
        value = run_on_files(label, limits or DOCUMENT_LIMITS, parse_documents, paths, jobs)
        outcomes: list[Extracted | MnemoflowError | None] = read_items(value, len(items))
    except (MnemoflowError, TypeError, KeyError, ValueError, AttributeError) as exc:  # a malformed answer too
        log.info("a group of %d documents is extracted again one by one: %s", len(items), exc)
        outcomes = [None] * len(items)
    return [_one(items[n], limits, max_chars) if outcome is None else outcome for n, outcome in enumerate(outcomes)]


def _one(
    item: tuple[str | os.PathLike[str], Format], limits: Limits | None, max_chars: int | None
) -> Extracted | MnemoflowError:
    try:
        return extract(item[0], item[1], limits=limits, max_chars=max_chars)
    except MnemoflowError as exc:
        return exc
