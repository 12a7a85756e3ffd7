"""What was ingested, as `/documents` shows it: a tenant's documents paged, and one with its memories in order."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy.orm import Session

from shared.errors import NotFound
from shared.model.statuses import DocumentStatus
from shared.storage import documents as document_store


def documents_page(
    session: Session, tenant: str, *, offset: int, limit: int, status: DocumentStatus | str | None = None
) -> tuple[list[dict[str, Any]], int]:
    """The tenant's documents, newest first, optionally of one status; and how many there are."""
    return document_store.list_documents(session, tenant, offset=offset, limit=limit, status=status)


def document_with_memories(
    session: Session, tenant: str, document_id: uuid.UUID, *, offset: int, limit: int
) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    """One document, its memories in reading order (paged) and how many it has; NotFound when not the tenant's."""
    row = document_store.get_document(session, document_id, tenant)
    if row is None:
        raise NotFound(f"document {document_id} not found for user_id {tenant!r}")
    memories, total = document_store.document_memories(session, tenant, document_id, offset=offset, limit=limit)
    return row, memories, total
