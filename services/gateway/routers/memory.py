"""/memory/*: OpenMemory-compatible memory routes."""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status

from services.gateway import metrics
from services.gateway.aftermath import QueryRecord
from services.gateway.deps import PrincipalDep, StateDep
from shared import retrieval_stats
from shared import sectors as sector_rules
from shared.activity import query_finished, query_started
from shared.errors import InvalidInput, NotFound
from shared.memory_service import CONTEXT_KEY, SEQUENCE_KEY, chunk_item, sequence_contexts
from shared.schemas import (
    BatchRequest,
    LinkCreate,
    MatchTrace,
    MemoryAdd,
    MemoryAddResult,
    MemoryPage,
    MemoryPublic,
    MemoryUpdate,
    PackingPublic,
    QueryMatch,
    QueryRequest,
    QueryResponse,
    ReinforceRequest,
    assume_utc,
)
from shared.storage import jobs as job_store
from shared.storage import memories as store
from shared.storage.memories import MemoryFilter
from shared.tasks import TaskName, embed_queue
from shared.text import normalize_content

log = logging.getLogger("mnemoflow.gateway")
router = APIRouter(prefix="/memory", tags=["memory"])


@router.post("/add", response_model=MemoryAddResult)
def add_memory(body: MemoryAdd, state: StateDep, principal: PrincipalDep) -> MemoryAddResult:
    """Store one memory synchronously: it is queryable when this call returns. Same content twice → same memory.
    `follows` links it after an earlier memory (the previous turn of a conversation)."""
    user_id = principal.tenant(body.user_id)
    with state.db.session() as session:
        memory, deduplicated = state.engine.add(session, user_id, body, follows=body.follows)
    metrics.MEMORIES_ADDED.labels(deduplicated=str(deduplicated).lower()).inc()
    return MemoryAddResult(**memory, deduplicated=deduplicated)


@router.post("/query", response_model=QueryResponse)  # serialised by the route itself (exclude_none)
def query_memories(body: QueryRequest, state: StateDep, principal: PrincipalDep) -> Response:
    """Find the memories that matter for `query`: full-text + vector candidates, waypoints, composite score.

    The answer is serialised here rather than by FastAPI, which would validate the finished model again on
    a worker thread of its own first (a second thread hop and a second validation on the hottest route)."""
    settings = state.settings
    user_id = principal.tenant(body.user_id, body.filters.user_id)
    k = body.k or settings.default_k
    if k > settings.max_k:
        raise InvalidInput(f"k={k} is above the maximum of {settings.max_k}")
    active = query_started(state.redis, settings.active_query_ttl_seconds)  # the decay cycle waits for us
    try:
        with state.db.reading() as session:
            outcome = state.engine.query(
                session,
                user_id,
                body.query,
                k=k,
                filters=body.filters,
                options=body.retrieval,
                token_budget=body.token_budget,
                diversity=body.diversity,
                recency_weight=body.recency_weight,
                side_session=state.db.reading,
            )
    except BaseException:
        query_finished(state.redis, active)
        raise
    matches = [
        QueryMatch(
            id=c.id,
            content=row["content"],
            score=round(c.score, 6),
            sectors=row["sectors"],
            primary_sector=row["primary_sector"],
            path=c.path,
            salience=row["salience"],
            last_seen_at=row["last_seen_at"],
            occurred_at=row.get("occurred_at"),
            tags=row["tags"],
            metadata=row["metadata"],
            document_id=row.get("document_id"),
            trace=MatchTrace(
                lexical_rank=c.lexical_rank,
                lexical_score=c.lexical_score,
                dense_rank=c.dense_rank,
                dense_similarity=c.dense_similarity,
                rrf_score=round(c.rrf_score, 6),
                period_rank=c.period_rank,
                hops=c.hops,
                via=str(c.via) if c.via else None,
                context_from=str(c.support_from) if c.components.get("context") else None,
                components=c.components,
            )
            if body.explain
            else None,
        )
        for c, row in outcome.matches
    ]
    metrics.QUERIES.labels(outcome="hit" if matches else "empty").inc()
    metrics.QUERY_MATCHES.observe(len(matches))
    result = retrieval_stats.outcome(len(matches), outcome.candidates)
    metrics.TENANT_QUERIES.labels(
        tenant=metrics.tenant_label(user_id, settings.metrics_max_tenants), outcome=result
    ).inc()
    reinforce = body.reinforce and settings.decay_reinforce_on_query and bool(outcome.reinforce_ids)
    regenerate = (
        body.reinforce
        and settings.regeneration_enabled
        and any(row["compression"] != "full" for _, row in outcome.matches)
    )
    reinforcement = (
        {
            "event_id": f"query:{uuid.uuid4()}",
            "user_id": user_id,
            "memory_ids": [str(i) for i in outcome.reinforce_ids],
            "traversed": [[str(a), str(b)] for a, b in outcome.traversed],
            "reinforce": reinforce,
            "regenerate": regenerate,
        }
        if reinforce or regenerate
        else None
    )
    # The bookkeeping is done after the response, gathered with other queries' (services/gateway/aftermath.py).
    state.aftermath.add(QueryRecord(active, user_id, result, outcome.embed_calls, reinforcement))
    answer = QueryResponse(
        query=body.query,
        matches=matches,
        candidates=outcome.candidates,
        packing=PackingPublic(
            returned=len(outcome.packing.chosen),
            considered=outcome.packing.considered,
            tokens=outcome.packing.tokens,
            budget=outcome.packing.budget,
            footnote=outcome.packing.footnote,
        )
        if outcome.packing
        else None,
        timings_ms=outcome.timings_ms if body.explain else None,
        query_sectors=list(outcome.query_sectors) if body.explain else None,
    )
    return Response(answer.model_dump_json(exclude_none=True), media_type="application/json")


@router.post("/batch", status_code=status.HTTP_202_ACCEPTED)
def add_batch(body: BatchRequest, state: StateDep, principal: PrincipalDep, response: Response) -> dict[str, Any]:
    """Store many memories through the sector queues: returns a job id at once; poll GET /jobs/{id}."""
    settings = state.settings
    user_id = principal.tenant(body.user_id)
    if len(body.items) > settings.max_batch_items:
        raise InvalidInput(
            f"{len(body.items):,} items in one batch; the limit is {settings.max_batch_items:,}. Split the batch."
        )
    by_sector: dict[str, list[dict[str, Any]]] = defaultdict(list)
    contexts = sequence_contexts(
        [item.content for item in body.items],
        turns=settings.embed_context_turns if body.sequence else 0,
        chars=settings.embed_context_chars,
    )
    for i, item in enumerate(body.items):
        state.engine.validate_item(item, where=f"items[{i}]")
        if item.user_id is not None:
            principal.tenant(item.user_id, user_id)  # an item may not write into another tenant
        classification = sector_rules.classify(normalize_content(item.content))
        raw = chunk_item(item, classification)
        if body.sequence:
            raw[SEQUENCE_KEY] = i
        if contexts[i]:
            raw[CONTEXT_KEY] = contexts[i]
        by_sector[classification.primary].append(raw)
    chunks: list[job_store.ChunkSpec] = []
    for sector in sorted(by_sector):
        items = by_sector[sector]
        for start in range(0, len(items), settings.chunk_size):
            chunks.append(job_store.ChunkSpec(len(chunks), sector, items[start : start + settings.chunk_size]))
    with state.db.session() as session:
        job_id, created = job_store.create_job(
            session,
            user_id=user_id,
            kind="batch",
            total=len(body.items),
            params={"items": len(body.items), "chunks": len(chunks), "sequence": body.sequence},
            idempotency_key=body.idempotency_key,
        )
        if created:
            job_store.add_chunks(session, job_id, chunks)
    if created:  # enqueue only after the commit; a lost message is re-sent by the sweeper
        metrics.JOBS_ENQUEUED.labels(kind="batch").inc()
        for chunk in chunks:
            state.send(
                TaskName.STORE_CHUNK,
                kwargs={"job_id": str(job_id), "seq": chunk.seq},
                queue=embed_queue(chunk.sector),
            )
    response.headers["Location"] = f"/jobs/{job_id}"
    return {
        "job_id": str(job_id),
        "status": "queued" if created else "existing",
        "items": len(body.items),
        "chunks": len(chunks) if created else None,
        "status_url": f"/jobs/{job_id}",
    }


@router.post("/reinforce")
def reinforce_memory(body: ReinforceRequest, state: StateDep, principal: PrincipalDep) -> dict[str, Any]:
    """Boost a memory's salience (default boost from settings) and mark it seen now."""
    user_id = principal.tenant(body.user_id)
    boost = body.boost if body.boost is not None else state.settings.manual_reinforce_boost
    with state.db.session() as session:
        rows = store.reinforce(session, user_id, [body.id], boost=boost, count_coactivation=False)
    if not rows:
        raise NotFound(f"memory {body.id} not found")
    return {"ok": True, "id": str(body.id), "salience": rows[0]["salience"]}


@router.post("/link")
def link_memories(body: LinkCreate, state: StateDep, principal: PrincipalDep) -> dict[str, Any]:
    """Link two memories: association (spreads activation), contradicts (the weaker is demoted at query
    time), supersedes (the destination is marked superseded), next (reading order)."""
    user_id = principal.tenant(body.user_id)
    with state.db.session() as session:
        linked = store.create_link(session, user_id, body.src_id, body.dst_id, kind=body.kind, weight=body.weight)
    if not linked:
        raise NotFound(f"memories {body.src_id} and {body.dst_id} are not both memories of user_id {user_id!r}")
    return {
        "ok": True,
        "src_id": str(body.src_id),
        "dst_id": str(body.dst_id),
        "kind": body.kind,
        "weight": body.weight,
    }


@router.get("/all", response_model=MemoryPage)
def list_all(
    state: StateDep,
    principal: PrincipalDep,
    u: Annotated[int, Query(ge=0, description="offset (OpenMemory's name)")] = 0,
    l: Annotated[int, Query(ge=1, le=1000, description="limit (OpenMemory's name)")] = 100,  # noqa: E741
    sector: str | None = None,
    user_id: str | None = None,
    tags: Annotated[list[str] | None, Query(description="only memories carrying all these tags")] = None,
    start_time: Annotated[datetime | None, Query(alias="startTime", description="stored at or after")] = None,
    end_time: Annotated[datetime | None, Query(alias="endTime", description="stored at or before")] = None,
    occurred_after: Annotated[
        datetime | None, Query(description="happened at or after (occurred_at, else when stored); UTC if no zone")
    ] = None,
    occurred_before: Annotated[datetime | None, Query(description="happened at or before")] = None,
) -> MemoryPage:
    """A tenant's memories, newest first, paginated with `u` (offset) and `l` (limit)."""
    tenant = principal.tenant(user_id)
    if sector is not None:
        _check_sector(sector)
    where = MemoryFilter(
        sectors=[sector] if sector else None,
        tags=tags,
        start_time=assume_utc(start_time),
        end_time=assume_utc(end_time),
        occurred_after=assume_utc(occurred_after),
        occurred_before=assume_utc(occurred_before),
    )
    with state.db.session() as session:
        rows, total = store.list_memories(session, tenant, offset=u, limit=l, where=where)
    return MemoryPage(items=[MemoryPublic(**r) for r in rows], total=total, offset=u, limit=l)


@router.get("/{memory_id}", response_model=MemoryPublic)
def get_memory(memory_id: uuid.UUID, state: StateDep, principal: PrincipalDep, user_id: str | None = None):
    tenant = principal.tenant(user_id)
    with state.db.session() as session:
        row = store.get_memory(session, tenant, memory_id)
    if row is None:
        raise NotFound(f"memory {memory_id} not found for user_id {tenant!r}")
    return MemoryPublic(**row)


@router.patch("/{memory_id}", response_model=MemoryPublic)
def update_memory(memory_id: uuid.UUID, body: MemoryUpdate, state: StateDep, principal: PrincipalDep):
    """Change a memory's content (re-classified and re-embedded), tags, metadata, status or occurred_at."""
    tenant = principal.tenant(body.user_id)
    if all(value is None for value in (body.content, body.tags, body.metadata, body.status, body.occurred_at)):
        raise InvalidInput("nothing to update: send content, tags, metadata, status or occurred_at")
    with state.db.session() as session:
        row = state.engine.update(session, tenant, memory_id, body.model_dump(exclude_unset=True))
    return MemoryPublic(**row)


@router.delete("/{memory_id}")
def delete_memory(memory_id: uuid.UUID, state: StateDep, principal: PrincipalDep, user_id: str | None = None):
    tenant = principal.tenant(user_id)
    with state.db.session() as session:
        deleted = state.engine.delete(session, tenant, memory_id)
    if not deleted:
        raise NotFound(f"memory {memory_id} not found for user_id {tenant!r}")
    return {"ok": True, "id": str(memory_id)}


def _check_sector(sector: str) -> None:
    if sector not in sector_rules.SECTORS:
        raise InvalidInput(f"unknown sector {sector!r}; expected one of {', '.join(sector_rules.SECTORS)}")
