"""Accepting an import (the gateway's half): read the file line by line, refuse it whole if any line is wrong,
write its documents now and its memories and waypoints as the chunks of one job (docs/data.md#importing).

Everything happens in the request's transaction: a file refused at its last line has written nothing. Memories go
in chunks of one sector each (a sector's queue stores them); waypoints go in chunks held back until every memory is
stored (`transfer.hold_chunks`), so both ends of each exist, whatever order the file was in. Documents are few and
written here: the job's parameters map the file's document ids to the stored ones, for the memory chunks.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from shared.api.data import ExportedDocument, ExportedMemory, ExportedWaypoint, ExportEnd, ExportHeader
from shared.data import lines
from shared.errors import Conflict, InvalidInput
from shared.jobs import ChunkSpec, ImportChunk, JobKind
from shared.memory.limits import InputLimits
from shared.model.statuses import DocumentStatus, JobPhase, JobStatus
from shared.storage import job_lookups, locks, transfer
from shared.storage import jobs as job_store
from shared.text import hash_normalized, normalize_content

LINK_SECTOR = "semantic"  # the queue a waypoint chunk goes to (it embeds nothing)
LINKS_PER_CHUNK = 2000
# A line's id the importer may not keep is stored under this id instead: the same for the same tenant and id, so an
# import run twice maps it twice the same way.
ALIASES = uuid.UUID("6d6e656d-6f66-6c6f-7769-6d706f727400")
MAX_LISTED = 1000  # lines listed as skipped (and as re-keyed) in an import's answer; the totals count every one
# Under a tenant's key a line keeps its id only where the tenant holds it: a fresh id and another tenant's are
# both re-keyed, with this same reason, so an import cannot tell which ids the store holds.
REKEYED = "stored under an id of this tenant's own: an import keeps a line's id only where the tenant holds it"
REKEYED_FOREIGN = "its id is another tenant's: stored under an id of this tenant's own"  # the operator's imports


IMPORT_RETRY_SECONDS = 10  # a second import of a tenant is refused while one runs: try again after this


def one_at_a_time(session: Session, tenant: str, *, lock: bool) -> None:
    """Conflict (409, Retry-After) while another import of the tenant is read or its job has not ended: one tenant
    cannot pile imports up. `lock` (the planning transaction's session): the tenant's import lock is taken too."""
    if lock and not locks.try_hold_for_tenant(session, locks.Lock.IMPORT, tenant):
        raise Conflict(
            f"another import of user_id {tenant!r} is being read now: one import runs per tenant at a time; send "
            "this file again once it has been answered",
            retry_after=IMPORT_RETRY_SECONDS,
        )
    running = job_lookups.unfinished_job(session, tenant, JobKind.IMPORT)
    if running is not None:
        raise Conflict(
            f"an import of user_id {tenant!r} is still running (job {running}): one import runs per tenant at a "
            f"time; send this file again once GET /jobs/{running} says it ended (or cancel it: POST "
            f"/jobs/{running}/cancel)",
            details={"job_id": str(running)},
            retry_after=IMPORT_RETRY_SECONDS,
        )


def alias(tenant: str, exported_id: uuid.UUID) -> uuid.UUID:
    return uuid.uuid5(ALIASES, f"{tenant}/{exported_id}")


@dataclass
class Planned:
    """What an import request wrote: its job (None when the file held nothing), counts, and what to send."""

    job_id: uuid.UUID | None
    source_user_id: str
    documents: int = 0
    memories: int = 0
    waypoints: int = 0
    chunks: int = 0
    messages: list[ImportChunk] = field(default_factory=list)
    finished: bool = False
    lines: int = 0
    answers: Answers | None = None


@dataclass
class Answers:
    """What becomes of the file's lines: how many it stores, and which it skips or stores under another id, why."""

    stored: int = 0
    skipped: list[dict[str, Any]] = field(default_factory=list)
    rekeyed: list[dict[str, Any]] = field(default_factory=list)
    skipped_lines: int = 0
    rekeyed_lines: int = 0

    def skip(self, line: int, why: str) -> None:
        self.skipped_lines += 1
        if len(self.skipped) < MAX_LISTED:
            self.skipped.append({"line": line, "why": why})

    def rekey(self, line: int, stored_as: uuid.UUID, why: str) -> None:
        self.stored += 1
        self.rekeyed_lines += 1
        if len(self.rekeyed) < MAX_LISTED:
            self.rekeyed.append({"line": line, "id": stored_as, "why": why})


class _Planner:
    def __init__(self, session: Session, tenant: str, header: ExportHeader, chunk_size: int, keep_ids: bool) -> None:
        self.session, self.tenant, self.chunk_size, self.keep_ids = session, tenant, chunk_size, keep_ids
        self.job_id, _ = job_store.create_job(
            session,
            user_id=tenant,
            kind=JobKind.IMPORT,
            total=0,
            params={
                "source_user_id": header.user_id,
                "exported_at": header.exported_at.isoformat(),
                "rekey": not keep_ids,  # the workers store a new memory under its alias, never under the file's id
            },
            idempotency_key=None,
        )
        self.answers = Answers()
        self.answering: list[tuple[int, ExportedMemory]] = []  # memory lines not yet answered
        self.first_of: dict[str, int] = {}  # a content hash -> the first line of the file that holds it
        self.memories: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.links: list[dict[str, Any]] = []
        self.documents: dict[str, str] = {}  # the file's document id -> the stored one, where they differ
        self.duplicates: list[tuple[uuid.UUID, uuid.UUID]] = []
        self.memory_seqs: list[tuple[int, str]] = []
        self.link_seqs: list[int] = []
        self.seq = 0

    def write(self, sector: str, items: list[dict[str, Any]], *, held: bool) -> None:
        job_store.add_chunks(self.session, self.job_id, [ChunkSpec(self.seq, sector, items)])
        if held:
            self.link_seqs.append(self.seq)
        else:
            self.memory_seqs.append((self.seq, sector))
        self.seq += 1

    def memory(self, line: ExportedMemory, number: int) -> None:
        self.answering.append((number, line))
        if len(self.answering) >= MAX_LISTED:
            self.answer_memories()
        batch = self.memories[line.primary_sector]
        batch.append(line.model_dump(mode="json"))
        if len(batch) >= self.chunk_size:
            self.write(line.primary_sector, batch, held=False)
            self.memories[line.primary_sector] = []

    def answer_memories(self) -> None:
        """Answer the memory lines read since the last call as their chunks' workers will store them (the store can
        change meanwhile: the job's result says what they did)."""
        pending, self.answering = self.answering, []
        hashes = [hash_normalized(normalize_content(line.content)) for _, line in pending]
        ids = [line.id for _, line in pending] + [alias(self.tenant, line.id) for _, line in pending]
        have_ids, have_hashes = transfer.known_memories(self.session, self.tenant, ids, hashes)
        for (number, line), content_hash in zip(pending, hashes, strict=True):
            held = next((i for i in (line.id, alias(self.tenant, line.id)) if i in have_ids), None)
            if held is not None and have_hashes.get(content_hash) == held:
                self.answers.skip(number, f"memory {held} is stored already (imported before)")
            elif held is not None:
                self.answers.skip(
                    number, f"memory {held} is stored with other content (changed since the export): it was kept"
                )
            elif content_hash in have_hashes:
                self.answers.skip(number, f"the same content is stored already, as memory {have_hashes[content_hash]}")
            elif content_hash in self.first_of:
                self.answers.skip(number, f"the same content as line {self.first_of[content_hash]}")
            else:
                self.first_of[content_hash] = number
                if self.keep_ids:
                    self.answers.stored += 1  # under its id, or (another tenant's) its alias: the job's result says
                else:
                    self.answers.rekey(number, alias(self.tenant, line.id), REKEYED)

    def link(self, line: ExportedWaypoint) -> None:
        self.answers.stored += 1  # one the tenant has already is kept (the job's result counts `links_kept`)
        self.links.append(line.model_dump(mode="json"))
        if len(self.links) >= LINKS_PER_CHUNK:
            self.write(LINK_SECTOR, self.links, held=True)
            self.links = []

    def document(self, line: ExportedDocument, number: int) -> None:
        """Store it now: under its id (the operator's imports, where it is free), else its alias; none when the tenant
        has it already (that id or its alias) or the same content (or URL), which it then stands for."""
        row = line.model_dump(exclude={"type", "duplicate_of"})
        if line.status in (
            DocumentStatus.QUEUED,
            DocumentStatus.EXTRACTING,
            DocumentStatus.EMBEDDING,
        ):  # its bytes are not in the file: it cannot go on
            row |= {
                "status": DocumentStatus.CANCELLED,
                "error": "exported before its ingestion finished; ingest it again",
            }
        aliased = alias(self.tenant, line.id)
        held = transfer.tenant_documents(self.session, self.tenant, [line.id, aliased])
        stored = line.id if line.id in held else aliased if held else None
        if stored is not None:
            self.answers.skip(number, f"document {stored} is stored already (imported before)")
        else:
            stored = self._document_identity(line, number)
        if stored is None:
            for candidate in (line.id, aliased) if self.keep_ids else (aliased,):
                stored = transfer.insert_document(self.session, self.tenant, row | {"id": candidate})
                if stored is not None:
                    break
            if stored is None:  # its content (or URL) was stored meanwhile, by an ingestion
                stored = self._document_identity(line, number)
            if stored is None:
                raise RuntimeError(f"document {line.id} could be stored neither under its id nor under its alias")
            if stored == line.id:
                self.answers.stored += 1
            elif stored == aliased:
                self.answers.rekey(number, stored, REKEYED if not self.keep_ids else REKEYED_FOREIGN)
        if stored != line.id:
            self.documents[str(line.id)] = str(stored)
        if line.duplicate_of is not None:
            self.duplicates.append((stored, line.duplicate_of))

    def _document_identity(self, line: ExportedDocument, number: int) -> uuid.UUID | None:
        existing = transfer.document_with_identity(
            self.session, self.tenant, content_hash=line.content_hash, url_hash=line.url_hash
        )
        if existing is not None:
            self.answers.skip(number, f"the same document is stored already, as document {existing}")
        return existing

    def finish(self) -> list[ImportChunk]:
        self.answer_memories()
        for sector, batch in self.memories.items():
            if batch:
                self.write(sector, batch, held=False)
        if self.links:
            self.write(LINK_SECTOR, self.links, held=True)
        self.duplicates = [(d, uuid.UUID(self.documents.get(str(o), str(o)))) for d, o in self.duplicates]
        transfer.set_duplicate_of(self.session, self.tenant, self.duplicates)
        if self.memory_seqs:  # waypoints wait for every memory; without memories they may go at once
            transfer.hold_chunks(self.session, self.job_id, self.link_seqs)
        sending = self.memory_seqs or [(seq, LINK_SECTOR) for seq in self.link_seqs]
        return [ImportChunk(job_id=self.job_id, seq=seq, sector=s, user_id=self.tenant) for seq, s in sending]


def plan_import(
    session: Session,
    tenant: str,
    source: Iterable[bytes],
    *,
    limits: InputLimits,
    chunk_size: int,
    keep_ids: bool = True,
) -> Planned:
    """Read the file (`source`: its lines) into an import job for `tenant`; InvalidInput (nothing written) when a
    line is wrong, the header is not first, or the file does not end with its `end` line and counts. `keep_ids`:
    a line keeps its id where no tenant holds it (the operator's imports); else only where the tenant holds it."""
    read = 0

    def counted() -> Iterable[tuple[int, bytes]]:
        nonlocal read
        for number, raw in enumerate(source, start=1):
            read = number
            if raw.strip():
                yield number, raw

    numbered = iter(counted())
    first = next(numbered, None)
    if first is None:
        raise InvalidInput("the file is empty: send an export of GET /export (JSON Lines, a header line first)")
    header = lines.parse(first[1], first[0])
    if not isinstance(header, ExportHeader):
        raise InvalidInput(f'line {first[0]}: an export begins with its header line (type "header")')
    planner = _Planner(session, tenant, header, chunk_size, keep_ids)
    counts = {"documents": 0, "memories": 0, "waypoints": 0}
    end: ExportEnd | None = None
    for number, raw in numbered:
        if end is not None:
            raise InvalidInput(f"line {number}: the file goes on after its end line", details={"line": number})
        line = lines.parse(raw, number)
        if isinstance(line, ExportedMemory):
            where = f"line {number} (memory {line.id})"
            limits.check_item(line.content, line.tags, line.metadata, where=where)
            limits.check_content(line.summary or "", where=f"{where}: summary")
            planner.memory(line, number)
            counts["memories"] += 1
        elif isinstance(line, ExportedWaypoint):
            planner.link(line)
            counts["waypoints"] += 1
        elif isinstance(line, ExportedDocument):
            limits.check_labels([], line.meta, where=f"line {number} (document {line.id}): meta")
            planner.document(line, number)
            counts["documents"] += 1
        elif isinstance(line, ExportEnd):
            end = line
        else:
            raise InvalidInput(f"line {number}: a second header", details={"line": number})
    if end is None:
        raise InvalidInput(
            "the file ends without its end line: it was cut short (export it again)", details={"lines": counts}
        )
    declared = end.model_dump(exclude={"type"})
    if declared != counts:
        raise InvalidInput(
            f"the end line counts {declared} but the file holds {counts}: it is incomplete or was edited",
            details={"declared": declared, "found": counts},
        )
    messages = planner.finish()
    total = counts["memories"] + counts["waypoints"]
    params = {"document_ids": planner.documents} | counts
    job_store.grow_job(session, planner.job_id, more_total=total, params=params)
    finished = not messages
    if finished:  # nothing but documents (or nothing at all): done now
        job_store.finish_job(
            session, planner.job_id, status=JobStatus.SUCCEEDED, result={"phase": JobPhase.DONE} | counts
        )
    return Planned(
        job_id=planner.job_id,
        source_user_id=header.user_id,
        chunks=planner.seq,
        messages=messages,
        finished=finished,
        lines=read,
        answers=planner.answers,
        **counts,
    )
