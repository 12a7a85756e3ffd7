"""Jobs and operator actions over REST: a job's state, a re-embed, a decay cycle."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .common import Provider, Real, known_sectors


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


class StoreModelPublic(BaseModel):
    """An embedding model as a store records it."""

    provider: str
    model: str
    dim: int


class ReembedAccepted(BaseModel):
    """202 from `POST /maintenance/reembed`: the job, and the models the sectors move from and to."""

    model_config = ConfigDict(populate_by_name=True)

    job_id: uuid.UUID
    status: Literal["queued"]
    sectors: list[str]
    from_: dict[str, StoreModelPublic] = Field(alias="from", description="each sector's model now")
    to: StoreModelPublic
    restart_with: str = Field(description="the settings to restart the stack with once the job has succeeded")
    status_url: str


class DecayRun(BaseModel):
    """A decay cycle (`POST /maintenance/decay`, `GET /maintenance/decay/{id}`): its status and counts so far."""

    id: uuid.UUID
    trigger: Literal["schedule", "operator"]
    status: Literal["queued", "running", "succeeded", "skipped", "failed"]
    ratio: float
    reason: str | None = Field(description="why a run was skipped or failed")
    processed: int = Field(description="memories walked so far")
    planned: int = Field(description="memories the run's plan walks in all (0 until it has started)")
    changed: int
    hot: int
    warm: int
    cold: int
    compressed: int
    fingerprinted: int
    segments: int
    segments_done: int
    duration_ms: float | None
    resumed_by: uuid.UUID | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    log: str | None = Field(default=None, description="the cycle's log line, once it has succeeded")
    status_url: str | None = Field(default=None, description="where to follow it (in the answer to a POST)")
