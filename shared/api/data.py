"""A tenant's data as a file, and the answers of the routes that move or remove it: the lines of an export
(`GET /export`, `POST /import`: JSON Lines, docs/data.md#the-export-format), an import's and an erasure's job.

Each line is one JSON object whose `type` says what it is: a `header` first, then `document`s, `memory`s and
`waypoint`s, and an `end` line that counts them (a file without it was cut short and is refused). A line is
validated on its own; what needs the store (ids, the models, the tenant's limits) is checked where it is imported.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from .common import (
    SECTORS,
    Real,
    TagsAndMetadata,
    UserId,
    assume_utc,
    clean_metadata,
    known_sectors,
    no_nul,
)
from .memories import memory_text

FORMAT: Literal["mnemoflow-export"] = "mnemoflow-export"
VERSION = 1
MAX_VECTOR_DIM = 4096
When = Annotated[datetime, AfterValidator(assume_utc)]
MaybeWhen = Annotated[datetime | None, AfterValidator(assume_utc)]


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Model(BaseModel):
    """An embedding model as a store records it (per sector)."""

    model_config = ConfigDict(extra="forbid")

    provider: str
    model: str
    dim: int = Field(ge=1, le=MAX_VECTOR_DIM)


class ExportHeader(_Line):
    """The first line: what the file is, whose, when, and which models made its vectors."""

    type: Literal["header"] = "header"
    format: Literal["mnemoflow-export"] = FORMAT
    version: int = Field(ge=1, description=f"the format's version; this server reads {VERSION}")
    user_id: str = Field(min_length=1, max_length=1024, description="the tenant it was exported from")
    exported_at: When
    mnemoflow: str = Field(description="the version of the server that wrote it")
    vectors: bool = Field(description="whether memory lines carry their vectors")
    models: dict[str, Model] = Field(default_factory=dict, description="the store's model per sector")

    _text = field_validator("user_id", "mnemoflow")(lambda cls, value: no_nul(value, "a header field"))

    @field_validator("version")
    @classmethod
    def _readable(cls, value: int) -> int:
        if value > VERSION:
            raise ValueError(f"version {value} is newer than this server reads ({VERSION}); upgrade the server")
        return value


class Vector(BaseModel):
    """A memory's vector as stored: little-endian float32, base64; `sectors` it serves (one model's sectors share
    one vector), `model` that made it, `dim` its length (a compressed memory's is shorter than its model's)."""

    model_config = ConfigDict(extra="forbid")

    sectors: list[str] = Field(min_length=1)
    model: str
    dim: int = Field(ge=1, le=MAX_VECTOR_DIM)
    data: str

    _sectors = field_validator("sectors")(lambda cls, value: known_sectors(value))

    @model_validator(mode="after")
    def _length(self) -> Vector:
        try:
            raw = base64.b64decode(self.data, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"vector data is not valid base64 ({exc})") from exc
        if len(raw) != 4 * self.dim:
            raise ValueError(f"vector data holds {len(raw)} bytes; {self.dim} float32 values are {4 * self.dim}")
        values = struct.unpack(f"<{self.dim}f", raw)
        if not all(math.isfinite(v) for v in values):
            raise ValueError("vector data holds a value that is not a finite number")
        if not any(values):
            raise ValueError("vector data is all zeros: a zero vector cannot be compared with any other")
        return self


class ExportedDocument(_Line):
    """An ingested document's record (its bytes are not kept once it is stored: its chunks are the memories)."""

    type: Literal["document"] = "document"
    id: uuid.UUID
    source_type: Literal["upload", "url"]
    source_uri: str | None = None
    filename: str | None = None
    mime_type: str | None = None
    format: str | None = None
    byte_size: int | None = Field(default=None, ge=0, le=2**62)
    content_hash: str | None = Field(default=None, max_length=128)
    url_hash: str | None = Field(default=None, max_length=128)
    status: Literal["queued", "extracting", "embedding", "done", "failed", "duplicate", "cancelled"]
    chunk_count: int = Field(default=0, ge=0, le=2**31 - 1)
    meta: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    duplicate_of: uuid.UUID | None = None
    created_at: When
    updated_at: When

    _meta = field_validator("meta")(lambda cls, value: clean_metadata(value))

    @field_validator("source_uri", "filename", "mime_type", "format", "content_hash", "url_hash", "error")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        return None if value is None else no_nul(value, "a document field")

    @model_validator(mode="after")
    def _identity(self) -> ExportedDocument:
        if self.content_hash is None and self.url_hash is None:
            raise ValueError("a document needs its content_hash or its url_hash")
        return self


class ExportedMemory(_Line, TagsAndMetadata):
    """A memory with everything that is its own; what the store derives (its content hash, its full-text terms,
    the tenant's term statistics) is made again on import."""

    type: Literal["memory"] = "memory"
    id: uuid.UUID
    content: str = Field(min_length=1)
    metadata: dict[str, Any] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list)
    primary_sector: str
    sectors: list[str] = Field(min_length=1, max_length=len(SECTORS))
    salience: Real = Field(ge=0.0, le=1.0)
    recall_lift: Real = Field(default=0.0, ge=0.0, le=1.0)
    decay_lambda: Real = Field(gt=0.0, le=10.0)
    coactivations: int = Field(default=0, ge=0, le=2**31 - 1)
    tier: Literal["hot", "warm", "cold"] = "warm"
    status: Literal["active", "superseded", "contradicted"] = "active"
    confidence: Real = Field(default=1.0, ge=0.0, le=1.0)
    classification_confidence: Real = Field(default=0.0, ge=0.0, le=1.0)
    compression: Literal["full", "compressed", "fingerprinted"] = "full"
    vector_dim: int | None = Field(default=None, ge=1, le=MAX_VECTOR_DIM, description="a compressed memory's width")
    summary: str | None = None
    version: int = Field(default=1, ge=1, le=2**31 - 1)
    created_at: When
    updated_at: When
    last_seen_at: When
    last_used_at: MaybeWhen = None
    occurred_at: MaybeWhen = None
    valid_to: MaybeWhen = Field(default=None, description="superseded: when it stopped being current")
    document_id: uuid.UUID | None = None
    chunk_index: int | None = Field(default=None, ge=0, le=2**31 - 1)
    indexed: bool = Field(
        default=True,
        description="its vectors are in the index; false: it was waiting for the background merge (the fresh "
        "tier), and is merged (and linked to its best match) after it is imported",
    )
    vectors: list[Vector] = Field(default_factory=list, max_length=len(SECTORS))

    _content = field_validator("content")(lambda cls, value: memory_text(value))
    _summary = field_validator("summary")(lambda cls, value: None if value is None else no_nul(value, "summary"))
    _sectors = field_validator("sectors")(lambda cls, value: known_sectors(value))

    @model_validator(mode="after")
    def _consistent(self) -> ExportedMemory:
        if len(set(self.sectors)) != len(self.sectors):
            raise ValueError("sectors lists a sector twice")
        if self.primary_sector != self.sectors[0]:
            raise ValueError(f"primary_sector {self.primary_sector!r} must be the first of sectors {self.sectors}")
        carried = [sector for vector in self.vectors for sector in vector.sectors]
        if len(set(carried)) != len(carried) or not set(carried) <= set(self.sectors):
            raise ValueError("each vector serves sectors of the memory, each sector at most one vector")
        if self.compression == "compressed" and self.vector_dim is None:
            raise ValueError("a compressed memory names its vector_dim")
        return self

    def vector_of(self, sector: str) -> Vector | None:
        return next((v for v in self.vectors if sector in v.sectors), None)


class ExportedWaypoint(_Line):
    """A typed link between two memories of the file (or of the tenant), by their ids in the file."""

    type: Literal["waypoint"] = "waypoint"
    src_id: uuid.UUID
    dst_id: uuid.UUID
    kind: Literal["association", "contradicts", "supersedes", "next"]
    weight: Real = Field(ge=0.0, le=1.0)
    created_at: When
    updated_at: When

    @model_validator(mode="after")
    def _two(self) -> ExportedWaypoint:
        if self.src_id == self.dst_id:
            raise ValueError("a waypoint links two different memories")
        return self


class ExportEnd(_Line):
    """The last line: how many of each the file holds (an import refuses a file that does not end with it)."""

    type: Literal["end"] = "end"
    documents: int = Field(ge=0)
    memories: int = Field(ge=0)
    waypoints: int = Field(ge=0)


class LineSkipped(BaseModel):
    """A line of the file that is not stored, and why (the tenant has it already, or the same content)."""

    line: int
    why: str


class LineRekeyed(BaseModel):
    """A line stored under another id than the file's, and why."""

    line: int
    id: uuid.UUID = Field(description="the id it is stored under")
    why: str


class ImportAccepted(BaseModel):
    """`POST /import`: the job that stores the file (follow `status_url`), what the file held, and what becomes of
    its lines: how many are stored, which are skipped or re-keyed and why (the first 1,000 of each; the totals count
    every one). A fresh id and an id another tenant holds are answered alike: re-keyed, for the same reason."""

    job_id: uuid.UUID | None = Field(description="none when the file held nothing to store")
    status: Literal["queued", "succeeded"]
    user_id: str
    source_user_id: str = Field(description="whom the file was exported from")
    documents: int
    memories: int
    waypoints: int
    chunks: int
    status_url: str | None
    # defaults: what a server older than these fields answers reads as nothing said
    lines: int = Field(default=0, description="lines read, the header and the end line among them")
    stored: int = Field(
        default=0, description="document, memory and waypoint lines it stores (memories and waypoints by its job)"
    )
    skipped: list[LineSkipped] = Field(default_factory=list, description="lines not stored, and why (the first 1,000)")
    rekeyed: list[LineRekeyed] = Field(
        default_factory=list, description="lines stored under another id, and why (the first 1,000)"
    )
    skipped_lines: int = Field(default=0, description="every skipped line")
    rekeyed_lines: int = Field(default=0, description="every re-keyed line")


class EraseRequest(BaseModel):
    """`POST /maintenance/erase` (operator): erase a tenant, every row and key of it."""

    model_config = ConfigDict(extra="forbid")

    user_id: UserId = Field(description="the tenant to erase")


class EraseAccepted(BaseModel):
    """`POST /maintenance/erase`: the erasure's job (the store's), and where it stands."""

    job_id: uuid.UUID
    status: Literal["queued", "running", "succeeded", "failed"]
    existing: bool = Field(description="an erasure of this tenant was already under way: this is its job")
    result: dict[str, Any] = Field(default_factory=dict, description="rows and keys removed so far, by table")
    status_url: str
