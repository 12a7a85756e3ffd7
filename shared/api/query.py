"""`POST /memory/query`: the request (filters, stage switches, budget, diversity) and the matches with their trace."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .common import SECTORS, UserId, assume_utc, known_sectors, no_nul, tag_filter

# A query is embedded and turned into a tsquery on the request path: beyond this it is a document, not a question
# (a megabyte was ~1,000 embedding windows and made to_tsvector raise).
MAX_QUERY_CHARS = 16_384


class QueryFilters(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    sector: str | None = None
    sectors: list[str] | None = None
    min_score: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="the least relevance (a match's similarity component) a memory needs to be returned; default "
        "MNEMOFLOW_MIN_SCORE (0.1). Salience, recency and use do not move it",
    )
    min_evidence: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="the least evidence (absolute: the query's raw cosine to a memory, the share of its terms the "
        "memory has, less its names the store has never seen) the best candidate needs, else the query returns "
        "nothing; default MNEMOFLOW_MIN_EVIDENCE (0.15), 0 = off",
    )
    user_id: UserId | None = None
    tags: list[str] | None = None
    start_time: datetime | None = Field(default=None, alias="startTime", description="stored at or after")
    end_time: datetime | None = Field(default=None, alias="endTime", description="stored at or before")
    occurred_after: datetime | None = Field(
        default=None, description="happened at or after (occurred_at, else when stored); UTC if no zone"
    )
    occurred_before: datetime | None = Field(default=None, description="happened at or before")
    as_of: datetime | None = Field(
        default=None,
        description="the versions of each fact current at this time: memories that had happened by then and were not "
        "yet superseded (valid_to later, or none); UTC if no zone",
    )

    _aware = field_validator("start_time", "end_time", "occurred_after", "occurred_before", "as_of")(
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
        return known_sectors(value)

    _tags = field_validator("tags")(lambda cls, value: tag_filter(value))


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
        description="composite: OpenMemory's score (similarity, salience, recency, waypoint), gated by min_score on "
        "relevance; fusion: the Reciprocal Rank Fusion score alone, no gate",
    )
    include_superseded: bool = Field(
        default=False,
        description="also return memories a newer version supersedes (each right below the version that replaces "
        "it, its score halved); by default the newer one answers for them (`answers_for` in its trace)",
    )

    @model_validator(mode="after")
    def _one_ranker(self) -> RetrievalOptions:
        if not (self.lexical or self.dense):
            raise ValueError("at least one of lexical and dense must be on")
        return self


class QueryRequest(BaseModel):
    """`POST /memory/query`."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field(
        min_length=1,
        max_length=MAX_QUERY_CHARS,
        description=f"what to recall, at most {MAX_QUERY_CHARS:,} characters (a question, not a document)",
    )
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
        description="MMR's lambda: re-rank for relevance minus redundancy (0.5 weighs both equally). Unset, only near "
        "copies (the same words as a memory above, in any case, punctuation or order) move below the other matches; "
        "1 turns that off too",
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
        return no_nul(value, "query")


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
    superseded_by: list[str] | None = Field(
        default=None, description="the newer memories that supersede this one (returned with include_superseded)"
    )
    superseded_on: datetime | None = Field(default=None, description="when it stopped being current (valid_to)")
    answers_for: list[str] | None = Field(
        default=None, description="the older versions this memory answers for, which the query did not return"
    )
    copy_of: str | None = Field(
        default=None, description="the memory above it with the same words (moved below the other matches)"
    )
    notes: list[str] | None = Field(
        default=None, description='what the versions and copies rules did, in words ("superseded by <id> on <date>")'
    )


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
    evidence: float | None = Field(
        default=None,
        description="With explain: true, the best candidate's evidence, which the gate compares with min_evidence "
        "(under it, nothing is returned)",
    )
    unknown_names: list[str] | None = Field(
        default=None, description="With explain: true, the query's names that no memory of the store has"
    )
