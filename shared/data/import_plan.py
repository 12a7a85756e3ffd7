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
from shared.errors import InvalidInput
from shared.jobs import ChunkSpec, ImportChunk, JobKind
from shared.memory.limits import InputLimits
from shared.storage import jobs as job_store
from shared.storage import transfer

LINK_SECTOR = "semantic"  # the queue a waypoint chunk goes to (it embeds nothing)
LINKS_PER_CHUNK = 2000
# A memory or document id the store holds for another tenant is stored under this id instead: the same for the
# same tenant and id, so an import run twice maps it twice the same way.
ALIASES = uuid.UUID("6d6e656d-6f66-6c6f-7769-6d706f727400")


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


class _Planner:
    def __init__(self, session: Session, tenant: str, header: ExportHeader, chunk_size: int) -> None:
        self.session, self.tenant, self.chunk_size = session, tenant, chunk_size
        self.job_id, _ = job_store.create_job(
            session,
            user_id=tenant,
            kind=JobKind.IMPORT,
            total=0,
            params={"source_user_id": header.user_id, "exported_at": header.exported_at.isoformat()},
            idempotency_key=None,
        )
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

    def memory(self, line: ExportedMemory) -> None:
        batch = self.memories[line.primary_sector]
        batch.append(line.model_dump(mode="json"))
        if len(batch) >= self.chunk_size:
            self.write(line.primary_sector, batch, held=False)
            self.memories[line.primary_sector] = []

    def link(self, line: ExportedWaypoint) -> None:
        self.links.append(line.model_dump(mode="json"))
        if len(self.links) >= LINKS_PER_CHUNK:
            self.write(LINK_SECTOR, self.links, held=True)
            self.links = []

    def document(self, line: ExportedDocument) -> None:
        """Store it now: under its id, or its alias when the id is another tenant's; none when the tenant has
        the same content (or URL) already, which it then stands for."""
        row = line.model_dump(exclude={"type", "duplicate_of"})
        if line.status in ("queued", "extracting", "embedding"):  # its bytes are not in the file: it cannot go on
            row |= {"status": "cancelled", "error": "exported before its ingestion finished; ingest it again"}
        stored = None
        for candidate in (line.id, alias(self.tenant, line.id)):
            if transfer.tenant_documents(self.session, self.tenant, [candidate]):
                stored = candidate  # imported before
                break
            existing = transfer.document_with_identity(
                self.session, self.tenant, content_hash=line.content_hash, url_hash=line.url_hash
            )
            if existing is not None:
                stored = existing
                break
            stored = transfer.insert_document(self.session, self.tenant, row | {"id": candidate})
            if stored is not None:
                break
        if stored is None:
            raise RuntimeError(f"document {line.id} could be stored neither under its id nor under its alias")
        if stored != line.id:
            self.documents[str(line.id)] = str(stored)
        if line.duplicate_of is not None:
            self.duplicates.append((stored, line.duplicate_of))

    def finish(self) -> list[ImportChunk]:
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
    session: Session, tenant: str, source: Iterable[bytes], *, limits: InputLimits, chunk_size: int
) -> Planned:
    """Read the file (`source`: its lines) into an import job for `tenant`; InvalidInput (nothing written) when a
    line is wrong, the header is not first, or the file does not end with its `end` line and counts."""
    numbered = ((number, raw) for number, raw in enumerate(source, start=1) if raw.strip())
    first = next(numbered, None)
    if first is None:
        raise InvalidInput("the file is empty: send an export of GET /export (JSON Lines, a header line first)")
    header = lines.parse(first[1], first[0])
    if not isinstance(header, ExportHeader):
        raise InvalidInput(f'line {first[0]}: an export begins with its header line (type "header")')
    planner = _Planner(session, tenant, header, chunk_size)
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
            planner.memory(line)
            counts["memories"] += 1
        elif isinstance(line, ExportedWaypoint):
            planner.link(line)
            counts["waypoints"] += 1
        elif isinstance(line, ExportedDocument):
            limits.check_labels([], line.meta, where=f"line {number} (document {line.id}): meta")
            planner.document(line)
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
        job_store.finish_job(session, planner.job_id, status="succeeded", result={"phase": "done"} | counts)
    return Planned(
        job_id=planner.job_id,
        source_user_id=header.user_id,
        chunks=planner.seq,
        messages=messages,
        finished=finished,
        **counts,
    )
