"""Ingesting one document (the ingest worker's half): fetch or read → extract → chunk → classify → plan.

Planning writes the job's chunks (one per sector and `chunk_size` items, each item a chunk of the document
with its placement and metadata) under the document row's lock, once: the document's status moves from
extracting to embedding in that transaction, and the staged upload is deleted in it. Until then nothing
is written but the document's status, so a worker lost mid-document leaves nothing to undo: a redelivery
or the sweeper starts it again from the staged bytes (or the URL). The embed workers store the chunks
(shared.memory.chunks) and the last one finishes the document (shared.ingest.completion).

Failures: a 4xx-class error (corrupt, unsupported, mislabelled, over a parser limit, too large, more text or
chunks than MNEMOFLOW_INGEST_MAX_CHARS or MNEMOFLOW_INGEST_MAX_CHUNKS allow, refused address, HTTP 4xx from the
site) will not change on a retry, so it fails the document at once; anything else (network, timeouts of the site,
database) is retried with backoff up to `job_max_attempts`. A document over a limit fails whole rather than
keeping its first part: stored in part, it would answer queries as if it were all there.
"""

from __future__ import annotations

import contextlib
import hashlib
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from shared.api.ingest import IngestConfig
from shared.backpressure import DOCUMENT_TASK_WINDOWS, DOCUMENT_WINDOWS, item_cost, specs_cost
from shared.config import Settings
from shared.db import Database
from shared.errors import ExtractionFailed, InvalidInput
from shared.ingest import Chunk, Format, check_declared, chunk_elements, extract, fetch_url, group, outcome, sniff
from shared.ingest.chunking import bound_by_tokens
from shared.ingest.completion import finish_document, log_document
from shared.ingest.elements import Extracted
from shared.ingest.outcome import IngestOutcome
from shared.ingest.sandbox import limits_for
from shared.jobs import ChunkItem, Classified, Placement, StoreChunk, plan_chunks
from shared.memory import sectors as sector_rules
from shared.model.statuses import DocumentStatus, JobPhase, JobStatus
from shared.storage import backlog, cancels, leases
from shared.storage import documents as document_store
from shared.storage import jobs as job_store
from shared.text import normalize_content

_OPEN = (DocumentStatus.QUEUED, DocumentStatus.EXTRACTING)
_EXTRACTING = {"phase": JobPhase.EXTRACTING}
TokenCount = Callable[[Sequence[str]], list[int]]  # each text's tokens for the embedding model


@dataclass
class _Prepared:
    fmt: Format
    chunks: list[Chunk]
    extracted: dict[str, Any]
    size: int
    source_url: str | None


def run_ingest(
    db: Database, settings: Settings, job_id: uuid.UUID, count_tokens: TokenCount | None = None
) -> IngestOutcome:
    """Advance an ingest job by one step; idempotent: a redelivered message finds its step done, or claimed by a
    live worker (whose lease a heartbeat renews while it extracts), and leaves without counting an attempt.
    `count_tokens`: the embedding model's tokenizer, which bounds each chunk (`chunking.bound_by_tokens`)."""
    owner = leases.owner_token()
    with db.session() as session:
        document = document_store.document_of_job(session, job_id, lock=True)
        if document is None:
            return IngestOutcome("skipped")
        current = job_store.get_job(session, job_id)
        if current is not None and current["status"] == JobStatus.CANCELLED:  # its document too, if not yet
            cancels.cancel_document(session, job_id)
            return IngestOutcome("cancelled")
        if document["status"] == DocumentStatus.EMBEDDING:  # planned; finish it if its last step was lost
            if job_store.open_chunk_count(session, job_id) == 0:
                finish_document(session, job_id)
                return IngestOutcome("finished")
            return IngestOutcome("skipped")
        if document["status"] not in _OPEN:
            return IngestOutcome("skipped")
        # the claim, the attempt counted and the phase recorded in one statement, which reads the job back
        held = leases.claim_jobs(session, [job_id], owner=owner, ttl=settings.job_lease_seconds, result=_EXTRACTING)
        if not held:
            return IngestOutcome("skipped")
        job, attempts = held[0], int(held[0]["attempts"])
        if attempts > settings.job_max_attempts:  # e.g. the document took the worker down every time
            message = f"gave up after {attempts - 1} attempts (the worker was lost each time?)"
            outcome.fail(session, document, job_id, message, {})
            return IngestOutcome("failed", error=message)
        document_store.set_status(session, document["id"], DocumentStatus.EXTRACTING, error=document["error"])
        companions = group.claim_companions(session, settings, document, owner)
        if companions:
            job_store.merge_result(session, job_id, {"grouped": True})
    if companions:
        claimed = [group.Claimed(document, job, attempts), *companions]
        with contextlib.ExitStack() as beating:
            for one in claimed:
                beating.enter_context(leases.Heartbeat(db, one.job["id"], owner, settings.job_lease_seconds))
            outcomes = _run_group(db, settings, claimed, count_tokens)
        outcomes[0].companions = outcomes[1:]
        return outcomes[0]
    with leases.Heartbeat(db, job_id, owner, settings.job_lease_seconds):
        stages: dict[str, int] = {}
        try:
            prepared = _prepare(db, settings, document, job["params"], stages, count_tokens)
        except Exception as exc:
            return _failed_attempt(db, settings, document, job_id, attempts, exc, stages)
        if isinstance(prepared, uuid.UUID):
            return _duplicate(db, document, job_id, prepared, stages)
        return _planned(db, settings, document, job, prepared, stages)


def _run_group(
    db: Database, settings: Settings, claimed: list[group.Claimed], count_tokens: TokenCount | None
) -> list[IngestOutcome]:
    """Extract the claimed uploads in one child (group.extract_claimed), chunk and classify each, then plan them all
    in one transaction, each document in a savepoint of its own: one document's failure fails that document only."""
    prepared: list[tuple[_Prepared, list[tuple[str, dict[str, Any]]]] | Exception] = []
    reads = group.extract_claimed(db, settings, claimed)
    for one, read in zip(claimed, reads, strict=True):
        result: _Prepared | Exception = read.error or ExtractionFailed("not extracted")
        if read.extracted is not None and read.fmt is not None:
            try:
                result = _chunked(
                    settings, one.job["params"], read.fmt, read.extracted, read.size, None, read.stages, count_tokens
                )
            except Exception as exc:
                result = exc
        if isinstance(result, Exception):
            prepared.append(result)
            continue
        prepared.append((result, _classified(result, one.document, one.job["params"], read.stages)))
    outcomes = []
    with db.session() as session:
        for one, read, ready in zip(claimed, reads, prepared, strict=True):
            document, job_id = one.document, one.job["id"]
            if isinstance(ready, Exception):
                outcomes.append(outcome.record(session, settings, document, job_id, one.attempts, ready, read.stages))
                continue
            try:
                with session.begin_nested():
                    refs = _plan(session, settings, document["id"], job_id, ready[0], ready[1], read.stages)
            except Exception as exc:  # rolled back to the savepoint: the group's other documents stay planned
                outcomes.append(outcome.record(session, settings, document, job_id, one.attempts, exc, read.stages))
                continue
            outcomes.append(_planned_outcome(refs, ready[0], read.stages))
    return outcomes


def _planned(
    db: Database,
    settings: Settings,
    document: dict[str, Any],
    job: dict[str, Any],
    prepared: _Prepared,
    stages: dict[str, int],
) -> IngestOutcome:
    items = _classified(prepared, document, job["params"], stages)
    with db.session() as session:
        refs = _plan(session, settings, document["id"], job["id"], prepared, items, stages)
    return _planned_outcome(refs, prepared, stages)


def _classified(
    prepared: _Prepared, document: dict[str, Any], params: dict[str, Any], stages: dict[str, int]
) -> list[tuple[str, dict[str, Any]]]:
    """The document's chunk items (`_items`), timed as its classify stage."""
    started = time.perf_counter()
    items = _items(prepared, document, params)
    stages["classify_ms"] = _ms(started)
    return items


def _planned_outcome(refs: list[StoreChunk], prepared: _Prepared, stages: dict[str, int]) -> IngestOutcome:
    return IngestOutcome("planned" if refs else "skipped", chunks=refs, fmt=prepared.fmt.value, stages_ms=stages)


def _prepare(
    db: Database,
    settings: Settings,
    document: dict[str, Any],
    params: dict[str, Any],
    stages: dict[str, int],
    count_tokens: TokenCount | None,
) -> _Prepared | uuid.UUID:
    """Extract and chunk the document; the id of the user's other document when a URL's content is known."""
    rules = settings.ingest
    with tempfile.TemporaryDirectory(prefix="mnemoflow-ingest-") as tmp:
        path = Path(tmp) / "input"
        started = time.perf_counter()
        source_url = None
        if document["source_type"] == "url":
            fetched = fetch_url(
                document["source_uri"],
                max_bytes=rules.max_bytes,
                total_timeout_s=rules.fetch_timeout_seconds,
                allow_private=rules.allow_private_urls,
                allowed_networks=list(rules.allowed_networks),
            )
            path.write_bytes(fetched.content)
            size, declared, source_url = len(fetched.content), fetched.content_type, fetched.url
            stages["fetch_ms"] = _ms(started)
            digest = hashlib.sha256(fetched.content).hexdigest()
            with db.session() as session:
                other = document_store.claim_content_hash(session, document["id"], document["user_id"], digest, size)
            if other is not None:
                return other
        else:
            size = group.read_staged(db, document["id"], path)
            declared = None
            stages["read_ms"] = _ms(started)
        started = time.perf_counter()
        fmt = sniff(path)
        if document["source_type"] == "url":  # an upload's declared type was checked when it was accepted
            check_declared(fmt, declared)
        extracted = extract(
            path,
            fmt,
            limits=limits_for(rules, fmt.kind),
            source_url=source_url,
            max_chars=rules.max_chars,
            max_media_seconds=rules.max_media_seconds,
        )
        stages["extract_ms"] = _ms(started)
    return _chunked(settings, params, fmt, extracted, size, source_url, stages, count_tokens)


def _chunked(
    settings: Settings,
    params: dict[str, Any],
    fmt: Format,
    extracted: Extracted,
    size: int,
    source_url: str | None,
    stages: dict[str, int],
    count_tokens: TokenCount | None = None,
) -> _Prepared:
    """The extracted document cut into chunks under its job's ingest config."""
    config = params.get("config") or {}
    rules = settings.ingest
    started = time.perf_counter()
    try:
        chunk_size, overlap = IngestConfig.model_validate(config).sizes(rules.chunk_size, rules.chunk_overlap)
    except ValueError as exc:  # accepted under other server settings: the job fails with the reason
        raise InvalidInput(str(exc)) from exc
    chunks = chunk_elements(
        extracted.elements,
        chunk_size=chunk_size,
        chunk_overlap=overlap,
        preserve_metadata=config.get("preserve_metadata", True),
        document_metadata=extracted.metadata,
        max_chunks=rules.max_chunks,
        max_chars=rules.max_chars,
    )
    if count_tokens is not None:  # one chunk, one bounded model call: its tokens, not its estimate
        chunks = bound_by_tokens(chunks, count_tokens, chunk_size, max_chunks=rules.max_chunks)
    stages["chunk_ms"] = _ms(started)
    return _Prepared(fmt, chunks, extracted.metadata, size, source_url)


def _items(prepared: _Prepared, document: dict[str, Any], params: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(primary sector, job chunk item) per chunk: content, tags, metadata, classification and placement."""
    source: dict[str, Any] = {"document_id": str(document["id"]), "type": document["source_type"]}
    source["format"] = prepared.fmt.value
    if document["filename"]:
        source["filename"] = document["filename"]
    if prepared.source_url:
        source["url"] = prepared.source_url
    occurred_at = params.get("occurred_at")
    happened = datetime.fromisoformat(occurred_at) if occurred_at else None
    items = []
    for chunk in prepared.chunks:
        chunk_meta = dict(chunk.metadata)
        document_meta = chunk_meta.pop("document", None)
        metadata = {**(params.get("metadata") or {}), "source": source, "chunk": {"index": chunk.index, **chunk_meta}}
        if document_meta:
            metadata["document"] = document_meta
        classification = sector_rules.classify(normalize_content(chunk.text))
        # Validated where it is stored (shared.memory.chunks), as a batch's items are: a chunk that cannot be a
        # memory fails there, with its job.
        item = ChunkItem.model_construct(
            content=chunk.text,
            tags=params.get("tags") or [],
            metadata=metadata,
            occurred_at=happened,
            classified=Classified(sectors=list(classification.sectors), confidence=classification.confidence),
            placement=Placement(document_id=document["id"], chunk_index=chunk.index),
        )
        items.append((classification.primary, item.stored()))
    return items


def _plan(
    session: Any,
    settings: Settings,
    document_id: uuid.UUID,
    job_id: uuid.UUID,
    prepared: _Prepared,
    items: list[tuple[str, dict[str, Any]]],
    stages: dict[str, int],
) -> list[StoreChunk]:
    """Write the job's chunks once (under the document's lock); [] when another delivery planned it first."""
    current = document_store.document_of_job(session, job_id, lock=True)
    if current is None or current["id"] != document_id or current["status"] not in _OPEN:
        return []
    if cancels.lock_job_status(session, job_id) == JobStatus.CANCELLED:  # nothing is planned after a cancel
        cancels.cancel_document(session, job_id)
        return []
    specs = plan_chunks(items, size=settings.chunk_size, max_cost=DOCUMENT_TASK_WINDOWS, cost=item_cost)
    # This document's job is open with nothing planned (counted as a waiting document): its chunks replace that.
    cost = specs_cost(specs) - DOCUMENT_WINDOWS
    priority = backlog.priority_of(session, current["user_id"], cost, fair=settings.fair_queues)
    job_store.add_chunks(session, job_id, specs, priority=priority)
    planned = {"phase": JobPhase.EMBEDDING, "chunks": len(items), "format": prepared.fmt.value, "bytes": prepared.size}
    job_store.grow_job(session, job_id, more_total=len(items), params={}, result=planned)
    document_store.set_status(
        session,
        document_id,
        "embedding",
        chunk_count=len(items),
        fmt=prepared.fmt.value,
        meta={"extracted": prepared.extracted, "stages_ms": stages},
    )
    if current["source_type"] == "upload":
        document_store.delete_upload(session, document_id)
    user_id = current["user_id"]
    return [
        StoreChunk(job_id=job_id, seq=spec.seq, sector=spec.sector, user_id=user_id, priority=priority)
        for spec in specs
    ]


def _duplicate(
    db: Database, document: dict[str, Any], job_id: uuid.UUID, other: uuid.UUID, stages: dict[str, int]
) -> IngestOutcome:
    """A URL whose content the user already ingested as another document: point to that one, store nothing."""
    with db.session() as session:
        document_store.set_status(
            session, document["id"], DocumentStatus.DUPLICATE, duplicate_of=other, meta={"stages_ms": stages}
        )
        result = {"phase": JobPhase.DUPLICATE, "duplicate_of": str(other), "stages_ms": stages}
        job_store.finish_job(session, job_id, status=JobStatus.SUCCEEDED, result=result)
    log_document(document, outcome=f"duplicate of {other}", chunks=0, stages=stages)
    return IngestOutcome("duplicate", stages_ms=stages)


def _failed_attempt(
    db: Database,
    settings: Settings,
    document: dict[str, Any],
    job_id: uuid.UUID,
    attempts: int,
    exc: Exception,
    stages: dict[str, int],
) -> IngestOutcome:
    with db.session() as session:
        return outcome.record(session, settings, document, job_id, attempts, exc, stages)


def _ms(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)
