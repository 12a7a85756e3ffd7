"""/memory/*: OpenMemory-compatible memory routes (the query is routers/query.py, ingestion routers/ingest.py)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status
from pydantic import AfterValidator

from services.gateway import metrics
from services.gateway.deps import PrincipalDep, StateDep, WorkDep, memory_tenant
from shared.api.common import MAX_OFFSET, UserId, assume_utc, tag_filter
from shared.api.memories import (
    BatchAccepted,
    BatchRequest,
    LinkCreate,
    LinkDeleted,
    LinkKind,
    MemoriesLinked,
    MemoryAdd,
    MemoryAddResult,
    MemoryChange,
    MemoryDeleted,
    MemoryHistory,
    MemoryPage,
    MemoryPublic,
    MemoryReinforced,
    MemoryUpdate,
    ReinforceRequest,
)
from shared.backpressure import Quota
from shared.embedding.cost import windows
from shared.errors import InvalidInput, NotFound
from shared.jobs import JobKind
from shared.memory import records
from shared.memory import sectors as sector_rules
from shared.memory.submit import submit_batch
from shared.model.statuses import JobStatus

router = APIRouter(prefix="/memory", tags=["memory"])
When = Annotated[datetime | None, AfterValidator(assume_utc)]  # a time in a query: UTC if it has no zone


@router.post("/add", response_model=MemoryAddResult)
def add_memory(body: MemoryAdd, state: StateDep, work: WorkDep, principal: PrincipalDep) -> MemoryAddResult:
    """Store one memory synchronously: it is queryable when this call returns. Same content twice → same memory.
    `follows` links it after an earlier memory (the previous turn of a conversation); without it, a conversation
    named in its metadata (`session_id`, `thread_id`, ...) links it after that conversation's previous add."""
    user_id = principal.tenant(body.user_id)
    state.limiter.charge(user_id, Quota.WRITES, windows(state.engine.check_content(body.content)))
    memory, deduplicated = state.engine.add(
        work.session, user_id, body, follows=body.follows, reading=lambda: state.db.reading(user_id)
    )
    metrics.MEMORIES_ADDED.labels(deduplicated=str(deduplicated).lower()).inc()
    return MemoryAddResult(**memory, deduplicated=deduplicated)


@router.post("/batch", status_code=status.HTTP_202_ACCEPTED, response_model=BatchAccepted)
def add_batch(
    body: BatchRequest, state: StateDep, work: WorkDep, principal: PrincipalDep, response: Response
) -> dict[str, Any]:
    """Store many memories through the sector queues: returns a job id at once; poll GET /jobs/{id}. The same batch
    sent again with its `idempotency_key` gets the same job ("existing"), also while the first is being written."""
    user_id = principal.tenant(body.user_id)
    for item in body.items:  # an item may not write into another tenant
        if item.user_id is not None:
            principal.tenant(item.user_id, user_id)
    submitted = submit_batch(
        work.session,
        user_id,
        body,
        settings=state.settings,
        tokens_of=state.engine.tokens,
        charge=lambda tokens: state.limiter.charge(user_id, Quota.WRITES, sum(windows(n) for n in tokens)),
        reading=lambda: state.db.reading(user_id),
    )
    if submitted.chunks is not None:  # sent after the commit; a lost message is re-sent by the sweeper
        work.enqueue(*submitted.messages)
        metrics.JOBS_ENQUEUED.labels(kind=JobKind.BATCH).inc()
    chunks = len(submitted.chunks) if submitted.chunks is not None else None
    return _batch_answer(response, submitted.job_id, len(body.items), chunks)


def _batch_answer(response: Response, job_id: uuid.UUID, items: int, chunks: int | None) -> dict[str, Any]:
    """A batch's answer: its job, "queued" when this request made it (with its chunks), else "existing"."""
    response.headers["Location"] = f"/jobs/{job_id}"
    return {
        "job_id": str(job_id),
        "status": JobStatus.QUEUED if chunks is not None else "existing",
        "items": items,
        "chunks": chunks,
        "status_url": f"/jobs/{job_id}",
    }


@router.post("/reinforce", response_model=MemoryReinforced)
def reinforce_memory(body: ReinforceRequest, state: StateDep, work: WorkDep, principal: PrincipalDep) -> dict[str, Any]:
    """The client used this memory: boost its salience (default boost from settings) and mark it seen and used now. It
    counts in ranking in full, unlike being returned by a query, and confirms what queries added first. Without a
    `user_id` and without keys, the memory is found by its id alone."""
    user_id = memory_tenant(state, principal, body.id, body.user_id)
    state.limiter.charge(user_id, Quota.WRITES)
    boost = body.boost if body.boost is not None else state.settings.reinforcement.manual_boost
    salience = records.reinforce(work.session, user_id, body.id, boost=boost)
    return {"ok": True, "id": str(body.id), "salience": salience}


@router.post("/link", response_model=MemoriesLinked)
def link_memories(body: LinkCreate, state: StateDep, work: WorkDep, principal: PrincipalDep) -> dict[str, Any]:
    """Link two memories: association (spreads activation), contradicts (the weaker is demoted at query
    time), supersedes (the destination is marked superseded), next (reading order)."""
    user_id = principal.tenant(body.user_id)
    state.limiter.charge(user_id, Quota.WRITES)
    records.link(work.session, user_id, body.src_id, body.dst_id, kind=body.kind, weight=body.weight)
    return {
        "ok": True,
        "src_id": str(body.src_id),
        "dst_id": str(body.dst_id),
        "kind": body.kind,
        "weight": body.weight,
    }


@router.delete("/link", response_model=LinkDeleted)
def unlink_memories(
    src_id: uuid.UUID,
    dst_id: uuid.UUID,
    state: StateDep,
    work: WorkDep,
    principal: PrincipalDep,
    kind: LinkKind = "association",
    user_id: UserId | None = None,
) -> dict[str, Any]:
    """Delete a typed waypoint. Deleting a `supersedes` link undoes the supersession: the older memory is current
    again (unless another memory still supersedes it), in its history as `restored`."""
    tenant = principal.tenant(user_id)
    state.limiter.charge(tenant, Quota.WRITES)
    restored = records.unlink(work.session, tenant, src_id, dst_id, kind=kind)
    return {"ok": True, "src_id": str(src_id), "dst_id": str(dst_id), "kind": kind, "restored": restored}


@router.get("/{memory_id}/history", response_model=MemoryHistory)
def memory_history(
    memory_id: uuid.UUID, state: StateDep, work: WorkDep, principal: PrincipalDep, user_id: UserId | None = None
) -> MemoryHistory:
    """Every change to a memory, oldest first: created (with its first content), content edits (with the content
    before), superseded by / supersedes another memory, restored, a duplicate merged into it."""
    tenant = memory_tenant(state, principal, memory_id, user_id)
    row, changes = records.history(work.session, tenant, memory_id)
    edits = [c for c in changes if c.event == "content"]
    first = edits[0].content if edits else row["content"]
    created = MemoryChange(event="created", at=row["created_at"], content=first)
    items = [created, *(MemoryChange(**vars(c)) for c in changes)]
    return MemoryHistory(id=memory_id, status=row["status"], valid_to=row["valid_to"], items=items)


@router.get("/all", response_model=MemoryPage)
def list_all(
    work: WorkDep,
    principal: PrincipalDep,
    u: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="offset (OpenMemory's name)")] = 0,
    l: Annotated[int, Query(ge=1, le=1000, description="limit (OpenMemory's name)")] = 100,  # noqa: E741
    sector: str | None = None,
    user_id: UserId | None = None,
    tags: Annotated[
        list[str] | None, Query(description="only memories carrying all these tags"), AfterValidator(tag_filter)
    ] = None,
    start_time: Annotated[When, Query(alias="startTime", description="stored at or after")] = None,
    end_time: Annotated[When, Query(alias="endTime", description="stored at or before")] = None,
    occurred_after: Annotated[
        When, Query(description="happened at or after (occurred_at, else when stored); UTC if no zone")
    ] = None,
    occurred_before: Annotated[When, Query(description="happened at or before")] = None,
) -> MemoryPage:
    """A tenant's memories, newest first, paginated with `u` (offset) and `l` (limit)."""
    tenant = principal.tenant(user_id)
    if sector is not None:
        _check_sector(sector)
    rows, total = records.memories_page(
        work.session,
        tenant,
        offset=u,
        limit=l,
        sectors=[sector] if sector else None,
        tags=tags,
        start_time=start_time,
        end_time=end_time,
        occurred_after=occurred_after,
        occurred_before=occurred_before,
    )
    return MemoryPage(items=[MemoryPublic(**r) for r in rows], total=total, offset=u, limit=l)


@router.get("/{memory_id}", response_model=MemoryPublic)
def get_memory(
    memory_id: uuid.UUID, state: StateDep, work: WorkDep, principal: PrincipalDep, user_id: UserId | None = None
):
    """A memory by id (without a `user_id` and without keys, whoever's it is)."""
    tenant = memory_tenant(state, principal, memory_id, user_id)
    return MemoryPublic(**records.memory_of(work.session, tenant, memory_id))


@router.patch("/{memory_id}", response_model=MemoryPublic)
def update_memory(memory_id: uuid.UUID, body: MemoryUpdate, state: StateDep, work: WorkDep, principal: PrincipalDep):
    """Change a memory's content (re-classified and re-embedded), tags, metadata, status or occurred_at."""
    if all(value is None for value in (body.content, body.tags, body.metadata, body.status, body.occurred_at)):
        raise InvalidInput("nothing to update: send content, tags, metadata, status or occurred_at")
    tenant = memory_tenant(state, principal, memory_id, body.user_id)
    cost = windows(state.engine.check_content(body.content)) if body.content is not None else 1
    state.limiter.charge(tenant, Quota.WRITES, cost)
    row = state.engine.update(
        work.session, tenant, memory_id, body.model_dump(exclude_unset=True), reading=lambda: state.db.reading(tenant)
    )
    return MemoryPublic(**row)


@router.delete("/{memory_id}", response_model=MemoryDeleted)
def delete_memory(
    memory_id: uuid.UUID, state: StateDep, work: WorkDep, principal: PrincipalDep, user_id: UserId | None = None
):
    """Delete a memory (without a `user_id` and without keys, whoever's it is); answers `{"ok": true, "id": ...}`."""
    tenant = memory_tenant(state, principal, memory_id, user_id)
    state.limiter.charge(tenant, Quota.WRITES)
    if not state.engine.delete(work.session, tenant, memory_id):
        raise NotFound(f"memory {memory_id} not found for user_id {tenant!r}")
    return {"ok": True, "id": str(memory_id)}


def _check_sector(sector: str) -> None:
    if sector not in sector_rules.SECTORS:
        raise InvalidInput(f"unknown sector {sector!r}; expected one of {', '.join(sector_rules.SECTORS)}")
