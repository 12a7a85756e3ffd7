"""Request and response shapes of the REST API (OpenMemory-compatible field names)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shared.sectors import SECTORS

UserId = str


def _no_nul(value: str, what: str) -> str:
    # PostgreSQL text and jsonb cannot hold U+0000: refuse it here rather than fail in the database.
    if "\x00" in value:
        raise ValueError(f"{what} contains a NUL character (U+0000), which cannot be stored")
    return value


def _clean_tags(tags: list[str]) -> list[str]:
    seen: dict[str, None] = {}
    for tag in tags:
        tag = _no_nul(tag.strip(), "a tag")
        if not tag:
            raise ValueError("tags must not be empty strings")
        seen.setdefault(tag, None)
    return list(seen)


def _known_sectors(value: list[str] | None) -> list[str] | None:
    for sector in value or []:
        if sector not in SECTORS:
            raise ValueError(f"unknown sector {sector!r}; expected one of {', '.join(SECTORS)}")
    return value


def _contains_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_contains_nul(k) or _contains_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_contains_nul(v) for v in value)
    return False


def _clean_metadata(value: dict[str, Any]) -> dict[str, Any]:
    if _contains_nul(value):
        raise ValueError("metadata contains a NUL character (U+0000), which cannot be stored")
    return value


class TagsAndMetadata(BaseModel):
    """Validation of `tags` and `metadata`, shared by the models that carry them."""

    @field_validator("tags", check_fields=False)
    @classmethod
    def _tags(cls, value: list[str]) -> list[str]:
        return _clean_tags(value)

    @field_validator("metadata", check_fields=False)
    @classmethod
    def _metadata(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _clean_metadata(value)


def assume_utc(value: datetime | None) -> datetime | None:
    """A time without a zone is UTC."""
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


class MemoryCreate(TagsAndMetadata):
    """One memory to store: `POST /memory/add` and each item of `POST /memory/batch`."""

    model_config = ConfigDict(extra="forbid")

    content: str = Field(min_length=1, description="The text to remember (kept verbatim).")
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    user_id: UserId | None = Field(default=None, min_length=1, max_length=256)
    salience: float | None = Field(default=None, ge=0.0, le=1.0, description="Initial salience; default by sector.")
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    occurred_at: datetime | None = Field(
        default=None,
        description="when what it records happened (a conversation turn's time, an event's date), ISO 8601; "
        "without a time zone it is UTC; default: when it is stored. A query naming a month or a year ranks "
        "memories that occurred then higher",
    )

    @field_validator("content")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("content must contain non-whitespace text")
        return _no_nul(value, "content")

    _aware = field_validator("occurred_at")(lambda cls, value: assume_utc(value))


class MemoryAdd(MemoryCreate):
    """`POST /memory/add`: one memory, optionally the next of a sequence the agent is writing."""

    follows: uuid.UUID | None = Field(
        default=None,
        description="the memory this one comes after (the previous turn of a conversation): a `next` waypoint "
        "links them, so a query that finds one can surface the other",
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
        return None if value is None else _no_nul(value, "content")

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else _clean_tags(value)

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else _clean_metadata(value)


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


class MemoryAddResult(MemoryPublic):
    """`POST /memory/add`: the memory, whether it already existed, and that it is queryable now."""

    deduplicated: bool = False
    queryable: bool = True
    chunks: int = 1


class QueryFilters(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    sector: str | None = None
    sectors: list[str] | None = None
    min_score: float | None = Field(default=None, ge=0.0, le=1.0)
    user_id: UserId | None = None
    tags: list[str] | None = None
    start_time: datetime | None = Field(default=None, alias="startTime", description="stored at or after")
    end_time: datetime | None = Field(default=None, alias="endTime", description="stored at or before")
    occurred_after: datetime | None = Field(
        default=None, description="happened at or after (occurred_at, else when stored); UTC if no zone"
    )
    occurred_before: datetime | None = Field(default=None, description="happened at or before")

    _aware = field_validator("start_time", "end_time", "occurred_after", "occurred_before")(
        lambda cls, value: assume_utc(value)
    )

    @model_validator(mode="after")
    def _ordered(self) -> QueryFilters:
        if self.occurred_after and self.occurred_before and self.occurred_after > self.occurred_before:
            raise ValueError("occurred_after is later than occurred_before: no memory can match")
        if self.start_time and self.end_time and self.start_time > self.end_time:
            raise ValueError("startTime is later than endTime: no memory can match")
        return self

    @field_validator("sector")
    @classmethod
    def _sector(cls, value: str | None) -> str | None:
        if value is not None and value not in SECTORS:
            raise ValueError(f"unknown sector {value!r}; expected one of {', '.join(SECTORS)}")
        return value

    @field_validator("sectors")
    @classmethod
    def _sectors(cls, value: list[str] | None) -> list[str] | None:
        return _known_sectors(value)


class RetrievalOptions(BaseModel):
    """Switches for the read path's stages (all on by default); for evaluation and tuning."""

    model_config = ConfigDict(extra="forbid")

    lexical: bool = Field(default=True, description="full-text (BM25) candidates")
    dense: bool = Field(default=True, description="vector candidates")
    waypoints: bool = Field(default=True, description="memories linked to a candidate by a waypoint")
    classify: bool = Field(
        default=False,
        description="search vectors only in the sectors the query itself is classified into (OpenMemory's query "
        "flow); a query no sector pattern matches searches all",
    )
    rank: Literal["composite", "fusion"] = Field(
        default="composite",
        description="composite: OpenMemory's score (similarity, salience, recency, waypoint) and the min_score "
        "gate; fusion: the Reciprocal Rank Fusion score alone, no gate",
    )

    @model_validator(mode="after")
    def _one_ranker(self) -> RetrievalOptions:
        if not (self.lexical or self.dense):
            raise ValueError("at least one of lexical and dense must be on")
        return self


class QueryRequest(BaseModel):
    """`POST /memory/query`."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1)
    k: int | None = Field(default=None, ge=1)
    filters: QueryFilters = Field(default_factory=QueryFilters)
    user_id: UserId | None = None
    explain: bool = False
    retrieval: RetrievalOptions = Field(default_factory=RetrievalOptions)
    token_budget: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="fill at most this many (estimated, CJK-aware) tokens with the best memories, still at most k",
    )
    diversity: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="MMR's lambda: re-rank for relevance minus redundancy (0.5 weighs both equally; 1 = off)",
    )
    recency_weight: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Recall's interpolation: 0 ranks by relevance, 1 weighs freshness as much (default: "
        "OpenMemory's fixed weights, or MNEMOFLOW_RECENCY_WEIGHT)",
    )
    reinforce: bool = Field(
        default=True,
        description="false: a read-only query (evaluation, previews): its hits are not reinforced or regenerated",
    )

    @field_validator("query")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("query must contain non-whitespace text")
        return _no_nul(value, "query")


class MatchTrace(BaseModel):
    """Why a memory was recalled (returned with `explain: true`)."""

    lexical_rank: int | None = None
    lexical_score: float | None = None
    dense_rank: int | None = None
    dense_similarity: float | None = None
    rrf_score: float = 0.0
    period_rank: int | None = Field(
        default=None, description="its rank in the search of the period the query names (time anchoring)"
    )
    hops: int = 0
    via: str | None = None
    context_from: str | None = Field(
        default=None, description="the linked memory whose relevance lent this one its `context` component"
    )
    components: dict[str, float]


class QueryMatch(BaseModel):
    id: uuid.UUID
    content: str
    score: float
    sectors: list[str]
    primary_sector: str
    path: list[str]
    salience: float
    last_seen_at: datetime
    occurred_at: datetime | None = None
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    document_id: uuid.UUID | None = Field(default=None, description="the document this memory is a chunk of")
    trace: MatchTrace | None = None


class PackingPublic(BaseModel):
    """How a token budget was filled (membox's footnote)."""

    returned: int
    considered: int
    tokens: int
    budget: int
    footnote: str


class QueryResponse(BaseModel):
    query: str
    matches: list[QueryMatch]
    candidates: int = 0
    packing: PackingPublic | None = None
    timings_ms: dict[str, float] | None = Field(
        default=None,
        description="With explain: true, milliseconds per stage and `total` for the pipeline; the full-text "
        "stage runs beside embedding and the dense search, so the stages may add up to more than the total.",
    )
    query_sectors: list[str] | None = Field(
        default=None, description="The sectors whose vectors were searched, with explain: true."
    )


class LinkCreate(BaseModel):
    """`POST /memory/link`: a typed waypoint between two of the tenant's memories."""

    model_config = ConfigDict(extra="forbid")

    src_id: uuid.UUID
    dst_id: uuid.UUID
    kind: Literal["association", "contradicts", "supersedes", "next"] = "association"
    weight: float = Field(default=1.0, gt=0.0, le=1.0)
    user_id: UserId | None = None

    @model_validator(mode="after")
    def _two_memories(self) -> LinkCreate:
        if self.src_id == self.dst_id:
            raise ValueError("src_id and dst_id must be two different memories")
        return self


class ReinforceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: uuid.UUID
    boost: float | None = Field(default=None, gt=0.0, le=1.0)
    user_id: UserId | None = None


class BatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[MemoryCreate] = Field(min_length=1)
    user_id: UserId | None = None
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)
    sequence: bool = Field(
        default=False,
        description="the items are one sequence in order (a conversation's turns, a session's notes): each is "
        "linked to the next by a `next` waypoint, so a query that finds one can surface its neighbours",
    )


class JobPublic(BaseModel):
    id: uuid.UUID
    kind: str
    status: Literal["queued", "running", "succeeded", "failed"]
    progress: dict[str, int]
    attempts: int
    error: str | None
    result: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class MemoryPage(BaseModel):
    items: list[MemoryPublic]
    total: int
    offset: int
    limit: int


class ReembedRequest(BaseModel):
    """Convert the whole store to another embedding model (operator action)."""

    model_config = ConfigDict(extra="forbid")

    provider: Literal["synthetic", "local", "static", "openai", "ollama"]
    dimensions: int | None = Field(
        default=None, ge=8, le=4000, description="required for HTTP providers; others know their own"
    )
    sectors: list[str] | None = Field(
        default=None, min_length=1, description="only these sectors (a model per sector: OM_EMBED_MODE=advanced)"
    )

    @field_validator("sectors")
    @classmethod
    def _sectors(cls, value: list[str] | None) -> list[str] | None:
        return sorted(set(_known_sectors(value) or [])) or None


class DecayRequest(BaseModel):
    """Run a decay cycle now (operator action)."""

    model_config = ConfigDict(extra="forbid")

    ratio: float | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        description="share of each sector segment to process; 1.0 for every memory (default OM_DECAY_RATIO)",
    )
