"""A tenant's small uploads claimed together and extracted in one sandboxed child.

docs/ingestion.md#small-documents-in-groups has the rules.

The ingest step that claims a small upload also claims up to `group_documents - 1` more of the same tenant's
queued uploads, never tried and held by no live worker, in its claim's transaction; they are read, sniffed and
extracted in one child (shared.ingest.extract.extract_group), then chunked and planned one by one by the pipeline.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.config import Settings
from shared.db import Database
from shared.errors import ExtractionFailed
from shared.ingest import extract_group, sniff
from shared.ingest.elements import Extracted
from shared.ingest.formats import Format, Kind
from shared.ingest.sandbox import limits_for
from shared.model.statuses import JobPhase
from shared.storage import documents as document_store
from shared.storage import leases

# The formats whose small uploads are parsed in groups: documents (audio and video take seconds each).
GROUPED = frozenset(f.value for f in Format if f.kind is Kind.DOCUMENT)


@dataclass
class Claimed:
    """A document whose ingest step this worker claimed, with its job and the attempt it counts."""

    document: dict[str, Any]
    job: dict[str, Any]
    attempts: int


@dataclass
class Read:
    """What extracting one claimed document gave: its format, elements and size, or the error that fails it."""

    fmt: Format | None = None
    extracted: Extracted | None = None
    size: int = 0
    error: Exception | None = None
    stages: dict[str, int] = field(default_factory=dict)


def groupable(settings: Settings, document: dict[str, Any]) -> bool:
    """Whether this document may be parsed with others of its tenant: a small upload of a document format."""
    rules = settings.ingest
    if rules.group_documents < 2 or document["source_type"] != "upload" or document["format"] not in GROUPED:
        return False
    return 0 < (document["byte_size"] or 0) <= rules.group_max_kb * 1024


def claim_companions(session: Any, settings: Settings, document: dict[str, Any], owner: str) -> list[Claimed]:
    """Claim up to group_documents - 1 more of this tenant's small queued uploads, never tried before, that no
    live worker holds ([] when `document` is not groupable); in the caller's transaction, so their own messages
    find them claimed and leave. Their jobs and documents are each written by one statement for the group."""
    if not groupable(settings, document):
        return []
    rules = settings.ingest
    found = document_store.queued_small_uploads(
        session,
        user_id=document["user_id"],
        besides=document["id"],
        formats=sorted(GROUPED),
        max_bytes=rules.group_max_kb * 1024,
        limit=rules.group_documents - 1,
    )
    jobs = leases.claim_jobs(
        session,
        [other["job_id"] for other in found],
        owner=owner,
        ttl=settings.job_lease_seconds,
        result={"phase": JobPhase.EXTRACTING, "grouped": True},
    )
    by_id = {job["id"]: job for job in jobs}
    claimed = [
        Claimed(other, by_id[other["job_id"]], by_id[other["job_id"]]["attempts"])
        for other in found
        if other["job_id"] in by_id
    ]
    document_store.mark_extracting(session, [one.document["id"] for one in claimed])
    return claimed


def read_staged(db: Database, document_id: Any, path: Path) -> int:
    """Write an upload's staged bytes to `path`; their size. ExtractionFailed when none are staged any more."""
    with db.session() as session, open(path, "wb") as target:
        return _staged(document_store.read_upload(session, document_id, target))


def _staged(size: int) -> int:
    """`size`, the bytes read from an upload's staging; ExtractionFailed when there were none."""
    if size == 0:
        raise ExtractionFailed("the uploaded bytes are no longer staged; upload the file again")
    return size


def extract_claimed(db: Database, settings: Settings, claimed: list[Claimed]) -> list[Read]:
    """Read the claimed uploads from their staging (one statement), sniff each, and extract them all in one child;
    in order."""
    rules = settings.ingest
    reads = [Read() for _ in claimed]
    with tempfile.TemporaryDirectory(prefix="mnemoflow-ingest-") as tmp:
        paths = [Path(tmp) / f"input{number}" for number in range(len(claimed))]
        started = time.perf_counter()
        with db.session() as session, contextlib.ExitStack() as opened:
            targets = {
                one.document["id"]: opened.enter_context(open(path, "wb"))
                for one, path in zip(claimed, paths, strict=True)
            }
            sizes = document_store.read_uploads(session, targets)
        read_ms = _ms(started) // max(1, len(claimed))  # one statement's time, shared evenly
        inputs: list[tuple[Read, Path]] = []
        for one, read, path in zip(claimed, reads, paths, strict=True):
            read.size = sizes[one.document["id"]]
            read.stages["read_ms"] = read_ms
            try:
                _staged(read.size)
                read.fmt = sniff(path)
            except Exception as exc:
                read.error = exc
                continue
            inputs.append((read, path))
        started = time.perf_counter()
        files = [(path, read.fmt) for read, path in inputs if read.fmt is not None]
        outcomes = extract_group(files, limits=limits_for(rules, Kind.DOCUMENT), max_chars=rules.max_chars)
        share = _ms(started) // max(1, len(inputs))  # the child's time, shared evenly
    for (read, _), outcome in zip(inputs, outcomes, strict=True):
        read.stages["extract_ms"] = share
        if isinstance(outcome, Extracted):
            read.extracted = outcome
        else:
            read.error = outcome
    return reads


def _ms(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)
