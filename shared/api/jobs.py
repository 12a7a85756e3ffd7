"""Jobs and operator actions over REST: a job's state, a re-embed, a decay cycle."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shared.api.common import Provider, Real, known_sectors


class JobPublic(BaseModel):
    id: uuid.UUID
    kind: str
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"]
    progress: dict[str, int]
    attempts: int
    error: str | None
    result: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class ReembedRequest(BaseModel):
    """Convert the whole store to another embedding model (operator action)."""

    model_config = ConfigDict(extra="forbid")

    provider: Provider
    dimensions: int | None = Field(
        default=None, ge=8, le=4000, description="required for HTTP providers; others know their own"
    )
    sectors: list[str] | None = Field(
        default=None, min_length=1, description="only these sectors (a model per sector: OM_EMBED_MODE=advanced)"
    )

    @field_validator("sectors")
    @classmethod
    def _sectors(cls, value: list[str] | None) -> list[str] | None:
        return sorted(set(known_sectors(value) or [])) or None


class DecayRequest(BaseModel):
    """Run a decay cycle now (operator action)."""

    model_config = ConfigDict(extra="forbid")

    ratio: Real | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        description="share of each sector segment to process; 1.0 for every memory (default OM_DECAY_RATIO)",
    )
