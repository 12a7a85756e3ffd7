"""Ingestion: documents, web pages and audio turned into memories.

The extraction layer, re-exported here:

    fmt = sniff(path)                                   # from the bytes; UnsupportedMedia (415) otherwise
    extracted = extract_document(path, declared_type)   # sandboxed parse or transcription
    chunks = chunk_elements(extracted.elements, document_metadata=extracted.metadata)
    fetched = fetch_url(url)                            # SSRF-safe; write .content to a file, then as above

and the document's way through the system: `intake.py` (the gateway accepts and stages it), `pipeline.py` (the
ingest worker extracts, chunks and plans it), `completion.py` (its last step), `params.py` (its limits).

Errors are shared.errors classes carrying their HTTP status: UnsupportedMedia 415, ExtractionFailed
and InvalidInput 422, PayloadTooLarge 413, UpstreamFailed 502.
"""

from __future__ import annotations

import os

from shared.ingest.chunking import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, Chunk, chunk_elements
from shared.ingest.elements import Element, Extracted
from shared.ingest.extract import extract, extract_group
from shared.ingest.fetch import Fetched, check_url, fetch_url
from shared.ingest.formats import Format, Kind
from shared.ingest.sandbox import DOCUMENT_LIMITS, MEDIA_LIMITS, Limits
from shared.ingest.sniff import check_declared, sniff

__all__ = [
    "DEFAULT_CHUNK_OVERLAP",
    "DEFAULT_CHUNK_SIZE",
    "DOCUMENT_LIMITS",
    "MEDIA_LIMITS",
    "Chunk",
    "Element",
    "Extracted",
    "Fetched",
    "Format",
    "Kind",
    "Limits",
    "check_declared",
    "check_url",
    "chunk_elements",
    "extract",
    "extract_document",
    "extract_group",
    "fetch_url",
    "sniff",
]


def extract_document(
    path: str | os.PathLike[str],
    declared_type: str | None = None,
    *,
    limits: Limits | None = None,
    source_url: str | None = None,
) -> Extracted:
    """Sniff the file at `path`, refuse it if `declared_type` contradicts its bytes, and extract it.

    `limits` defaults to DOCUMENT_LIMITS (120 s, 2 GiB) for documents and MEDIA_LIMITS for audio/video.
    """
    fmt = sniff(path)
    check_declared(fmt, declared_type)
    return extract(path, fmt, limits=limits, source_url=source_url)
