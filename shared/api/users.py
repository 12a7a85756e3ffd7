"""OpenMemory's `/users/{user_id}/*`: a user's memories, paged, and their extractive summary."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel, Field

from .memories import MemoryPublic


class UserMemoriesPage(BaseModel):
    """`GET /users/{user_id}/memories`: the user's memories, newest first (OpenMemory's `l` and `u` page them)."""

    user_id: str
    items: list[MemoryPublic]
    total: int
    offset: int
    limit: int


class SummaryHighlight(BaseModel):
    id: uuid.UUID
    content: str = Field(description="the memory, cut to a line")
    salience: float


class SectorSummary(BaseModel):
    sector: str
    count: int = Field(description="the user's memories whose primary sector this is")
    highlights: list[SummaryHighlight] = Field(description="the memories that best represent the sector")


class UserSummary(BaseModel):
    """`GET /users/{user_id}/summary`: what a user's memories say, extracted from them (no model)."""

    user_id: str
    summary: str = Field(description="counts by sector, top terms, and each sector's most representative memories")
    reflection_count: int = Field(description="memories whose primary sector is reflective")
    memory_count: int
    sectors: list[SectorSummary]
    top_terms: list[str]
    updated_at: datetime = Field(description="when the summary was built")


class SummaryRegeneration(BaseModel):
    """`POST /users/{user_id}/summary/regenerate`: the job that rebuilds the summary, and the summary as it is now."""

    ok: bool = True
    user_id: str
    job_id: uuid.UUID
    status: str = Field(description="`queued`, or `existing` when a regeneration was already waiting")
    status_url: str
    summary: str | None = Field(description="the summary before this regeneration (null: none built yet)")
    reflection_count: int | None
