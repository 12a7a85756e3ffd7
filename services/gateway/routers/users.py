"""/users/{user_id}/*: OpenMemory's routes for one user: their memories, paged, and their extractive summary."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status

from services.gateway import metrics
from services.gateway.deps import PrincipalDep, StateDep, WorkDep
from shared.api.common import MAX_OFFSET, UserId
from shared.api.memories import MemoryPublic
from shared.api.users import SectorSummary, SummaryRegeneration, UserMemoriesPage, UserSummary
from shared.backpressure import Quota
from shared.jobs import JobKind
from shared.memory import records, summaries
from shared.model.statuses import JobStatus

router = APIRouter(prefix="/users", tags=["users"])


@router.get("/{user_id}/memories", response_model=UserMemoriesPage)
def user_memories(
    user_id: UserId,
    work: WorkDep,
    principal: PrincipalDep,
    u: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="offset (OpenMemory's name)")] = 0,
    l: Annotated[int, Query(ge=1, le=1000, description="limit (OpenMemory's name)")] = 100,  # noqa: E741
) -> UserMemoriesPage:
    """The user's memories, newest first, paginated with `u` (offset) and `l` (limit)."""
    tenant = principal.tenant(user_id)
    rows, total = records.memories_page(work.session, tenant, offset=u, limit=l)
    return UserMemoriesPage(user_id=tenant, items=[MemoryPublic(**r) for r in rows], total=total, offset=u, limit=l)


@router.get("/{user_id}/summary", response_model=UserSummary)
def user_summary(user_id: UserId, state: StateDep, work: WorkDep, principal: PrincipalDep) -> UserSummary:
    """What the user's memories say, extracted from them (no model): counts by sector, the terms they share most,
    and each sector's most salient and representative memories. Stored; built again when read after memories were
    added or deleted, and by `POST /users/{user_id}/summary/regenerate`."""
    tenant = principal.tenant(user_id)
    return summary_public(summaries.current(work.session, tenant, state.settings.user_summary))


@router.post("/{user_id}/summary/regenerate", status_code=status.HTTP_202_ACCEPTED, response_model=SummaryRegeneration)
def regenerate_summary(
    user_id: UserId, state: StateDep, work: WorkDep, principal: PrincipalDep, response: Response
) -> SummaryRegeneration:
    """Rebuild the user's summary in a job on the maintenance queue: `202` and the job (poll `GET /jobs/{id}`); a
    regeneration still waiting is returned rather than another queued. The summary as it is now comes with it."""
    tenant = principal.tenant(user_id)
    state.limiter.charge(tenant, Quota.WRITES)
    asked = summaries.request_regeneration(work.session, tenant)
    if asked.message is not None:
        work.enqueue(asked.message)  # after the commit
        metrics.JOBS_ENQUEUED.labels(kind=JobKind.SUMMARY).inc()
    job_id, stored = asked.job_id, asked.stored
    response.headers["Location"] = f"/jobs/{job_id}"
    return SummaryRegeneration(
        user_id=tenant,
        job_id=job_id,
        status=JobStatus.QUEUED if asked.message is not None else "existing",
        status_url=f"/jobs/{job_id}",
        summary=stored["summary"] if stored else None,
        reflection_count=stored["reflection_count"] if stored else None,
    )


def summary_public(row: dict[str, Any]) -> UserSummary:
    digest = row["digest"] or {}
    return UserSummary(
        user_id=row["user_id"],
        summary=row["summary"],
        reflection_count=row["reflection_count"],
        memory_count=row["memory_count"],
        sectors=[SectorSummary(**s) for s in digest.get("sectors", [])],
        top_terms=digest.get("top_terms", []),
        updated_at=row["updated_at"],
    )
