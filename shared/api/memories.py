"""Memories over REST: add, batch, update, link, reinforce, and how a memory is returned (OpenMemory's field names)."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .common import Real, TagsAndMetadata, UserId, assume_utc, clean_metadata, clean_tags, no_nul

# Where clients that have no `occurred_at` put a memory's time in its metadata, looked at in this order.
METADATA_TIME_KEYS: tuple[str, ...] = ("timestamp", "time", "date")


def occurred_from_metadata(metadata: dict[str, Any]) -> datetime | None:
    """The first of `METADATA_TIME_KEYS` whose value is an ISO 8601 date or time (a date alone: its midnight; no
    zone: UTC); None if none is. Anything else there is the client's own business and is passed over."""
    for name in METADATA_TIME_KEYS:
        value = metadata.get(name)
        if not isinstance(value, str):
            continue
        try:
            return assume_utc(datetime.fromisoformat(value.strip()))
        except ValueError:
            continue
    return None


def memory_text(value: str) -> str:
    """A memory's content as written (added or changed): some text that is not whitespace, and no NUL."""
    if not value.strip():
        raise ValueError("content must contain non-whitespace text")
    return no_nul(value, "content")


LinkKind = Literal["association", "contradicts", "supersedes", "next"]


class MemoryCreate(TagsAndMetadata):
    """One memory to store: `POST /memory/add` and each item of `POST /memory/batch`."""

    model_config = ConfigDict(extra="forbid")

    content: str = Field(min_length=1, description="The text to remember (kept verbatim).")
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    user_id: UserId | None = None
    salience: Real | None = Field(default=None, ge=0.0, le=1.0, description="Initial salience; default by sector.")
    confidence: Real = Field(default=1.0, ge=0.0, le=1.0)
    occurred_at: datetime | None = Field(
        default=None,
        description="when what it records happened (a conversation turn's time, an event's date), ISO 8601; "
        "without a time zone it is UTC; default: an ISO 8601 `timestamp`, `time` or `date` in metadata, else "
        "when it is stored. A query naming a month or a year ranks memories that occurred then higher",
    )

    @field_validator("content")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        return memory_text(value)

    _aware = field_validator("occurred_at")(lambda cls, value: assume_utc(value))

    @model_validator(mode="after")
    def _occurred_from_metadata(self) -> MemoryCreate:
        if self.occurred_at is None and self.metadata:
            self.occurred_at = occurred_from_metadata(self.metadata)
        return self


class MemoryAdd(MemoryCreate):
    """`POST /memory/add`: one memory, optionally the next of a sequence the agent is writing."""

    follows: uuid.UUID | None = Field(
        default=None,
        description="the memory this one comes after (the previous turn of a conversation): a `next` waypoint "
        "links them, so a query that finds one can surface the other. Without it, a memory whose metadata names "
        "a conversation (`session_id`, `thread_id`, `conversation_id` or `run_id`) follows the previous memory "
        "added with the same one",
    )


class MemoryUpdate(BaseModel):
    """`PATCH /memory/{id}`: change content, tags, metadata, status or when it occurred."""

    model_config = ConfigDict(extra="forbid")

    content: str | None = Field(default=None, min_length=1)
    tags: list[str] | None = None
    metadata: dict[str, Any] | None = None
    status: Literal["active", "superseded", "contradicted"] | None = Field(
        default=None, description="OpenMem's status; superseded scores x0.5, contradicted x0.3"
    )
    occurred_at: datetime | None = Field(default=None, description="when what it records happened (UTC if no zone)")
    user_id: UserId | None = None

    _aware = field_validator("occurred_at")(lambda cls, value: assume_utc(value))

    @field_validator("content")
    @classmethod
    def _content(cls, value: str | None) -> str | None:
        return None if value is None else memory_text(value)

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else clean_tags(value)

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else clean_metadata(value)


class MemoryPublic(BaseModel):
    """A stored memory as the API returns it."""

    id: uuid.UUID
    user_id: str
    content: str
    summary: str | None = None
    primary_sector: str
    sectors: list[str]
    tags: list[str]
    metadata: dict[str, Any]
    salience: float
    decay_lambda: float
    coactivations: int
    tier: str
    status: str
    confidence: float
    compression: str
    created_at: datetime
    updated_at: datetime
    last_seen_at: datetime
    occurred_at: datetime | None = Field(default=None, description="when what it records happened, if the writer said")
    document_id: uuid.UUID | None = None
    valid_to: datetime | None = Field(
        default=None, description="when it stopped being current (status superseded): the time of what replaced it"
    )


class MemoryAddResult(MemoryPublic):
    """`POST /memory/add`: the memory, whether it already existed, and that it is queryable now."""

    deduplicated: bool = False
    queryable: bool = True
    chunks: int = 1


class LinkCreate(BaseModel):
    """`POST /memory/link`: a typed waypoint between two of the tenant's memories."""

    model_config = ConfigDict(extra="forbid")

    src_id: uuid.UUID
    dst_id: uuid.UUID
    kind: LinkKind = "association"
    weight: Real = Field(default=1.0, gt=0.0, le=1.0)
    user_id: UserId | None = None

    @model_validator(mode="after")
    def _two_memories(self) -> LinkCreate:
        if self.src_id == self.dst_id:
            raise ValueError("src_id and dst_id must be two different memories")
        return self


class ReinforceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: uuid.UUID
    boost: Real | None = Field(default=None, gt=0.0, le=1.0)
    user_id: UserId | None = None


class BatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[MemoryCreate] = Field(min_length=1)
    user_id: UserId | None = None
    idempotency_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="the same key with the same batch returns the first job; with another batch it is a 409",
    )
    sequence: bool = Field(
        default=False,
        description="the items are one sequence in order (a conversation's turns, a session's notes): each is "
        "linked to the next by a `next` waypoint, so a query that finds one can surface its neighbours",
    )

    _key = field_validator("idempotency_key")(
        lambda cls, value: None if value is None else no_nul(value, "idempotency_key")
    )

    def request_hash(self) -> str:
        """SHA-256 of the batch as validated, in canonical JSON: the same batch sent with other spacing, key order
        or defaults spelt out hashes the same. The key and the user ids are left out (the key's scope is the
        tenant, and an item may only name the batch's own)."""
        canonical = self.model_dump(
            mode="json", exclude={"idempotency_key": True, "user_id": True, "items": {"__all__": {"user_id"}}}
        )
        encoded = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(encoded.encode()).hexdigest()


class MemoryPage(BaseModel):
    items: list[MemoryPublic]
    total: int
    offset: int
    limit: int


class BatchAccepted(BaseModel):
    """202 from `POST /memory/batch`: the job that stores the items; follow `status_url`."""

    job_id: uuid.UUID
    status: Literal["queued", "existing"] = Field(
        description="existing: the idempotency_key was seen with this same batch; its first job is returned"
    )
    items: int
    chunks: int | None = Field(description="the job's chunks (one sector each); null for an existing job")
    status_url: str


class MemoryDeleted(BaseModel):
    """`DELETE /memory/{id}`."""

    ok: bool = True
    id: uuid.UUID


class MemoryReinforced(BaseModel):
    """`POST /memory/reinforce`: the memory's salience after the boost."""

    ok: bool = True
    id: uuid.UUID
    salience: float


class MemoriesLinked(BaseModel):
    """`POST /memory/link`: the waypoint as stored."""

    ok: bool = True
    src_id: uuid.UUID
    dst_id: uuid.UUID
    kind: LinkKind
    weight: float


class LinkDeleted(BaseModel):
    """`DELETE /memory/link`: the waypoint is gone; for `supersedes`, whether the older memory is current again."""

    ok: bool = True
    src_id: uuid.UUID
    dst_id: uuid.UUID
    kind: LinkKind
    restored: bool = Field(default=False, description="supersedes: the older memory is current again")


class MemoryChange(BaseModel):
    """One change to a memory. `created` carries the first content; `content` the content it had before the edit;
    `superseded` / `supersedes` / `restored` name the other memory in `other_id`; `merged`, the duplicate text."""

    event: Literal["created", "content", "superseded", "supersedes", "restored", "merged"]
    at: datetime
    other_id: uuid.UUID | None = None
    content: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class MemoryHistory(BaseModel):
    """`GET /memory/{id}/history`: every change to a memory, oldest first."""

    id: uuid.UUID
    status: str
    valid_to: datetime | None = None
    items: list[MemoryChange]
