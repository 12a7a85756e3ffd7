"""/documents: what was ingested, from where, its status and error, and the memories made from it."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, Query

from services.gateway.deps import PrincipalDep, WorkDep
from services.gateway.job_views import job_public
from shared.api.common import MAX_OFFSET, UserId
from shared.api.ingest import DocumentDetail, DocumentMemory, DocumentPage, DocumentPublic
from shared.ingest import listing

router = APIRouter(prefix="/documents", tags=["documents"])
DocumentStatus = Literal["queued", "extracting", "embedding", "done", "failed", "duplicate", "cancelled"]


@router.get("", response_model=DocumentPage)
def list_documents(
    work: WorkDep,
    principal: PrincipalDep,
    user_id: UserId | None = None,
    status: DocumentStatus | None = None,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> DocumentPage:
    """The tenant's documents, newest first, optionally of one status."""
    tenant = principal.tenant(user_id)
    rows, total = listing.documents_page(work.session, tenant, offset=offset, limit=limit, status=status)
    return DocumentPage(items=[DocumentPublic.of(r) for r in rows], total=total, offset=offset, limit=limit)


@router.get("/{document_id}", response_model=DocumentDetail)
def get_document(
    document_id: uuid.UUID,
    work: WorkDep,
    principal: PrincipalDep,
    user_id: UserId | None = None,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="first memory (in reading order) to list")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000, description="memories to list")] = 100,
) -> DocumentDetail:
    """One document: status, source, format, chunk count, error, metadata, its job and its memories in order."""
    tenant = principal.tenant(user_id)
    row, memories, total = listing.document_with_memories(work.session, tenant, document_id, offset=offset, limit=limit)
    job = job_public(work.session, row["job_id"], tenant) if row["job_id"] else None
    return DocumentDetail(
        **DocumentPublic.of(row).model_dump(),
        memories=[DocumentMemory(**m) for m in memories],
        memories_total=total,
        offset=offset,
        limit=limit,
        job=job,
    )
