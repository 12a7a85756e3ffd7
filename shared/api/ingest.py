"""Ingestion and documents over REST: OpenMemory's ingest request shapes, what an ingest answers, documents."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from .common import TagsAndMetadata, UserId, assume_utc, no_nul
from .jobs import JobPublic


class IngestConfig(BaseModel):
    """Chunking (architecture seed §5): chunk_size and chunk_overlap in estimated tokens; unset: the settings'."""

    chunk_size: int | None = Field(default=None, ge=16, le=8192, description="max tokens per chunk [2048]")
    chunk_overlap: int | None = Field(default=None, ge=0, le=4096, description="tokens repeated between chunks [256]")
    preserve_metadata: bool = Field(default=True, description="keep pages, headings, timestamps on each chunk")

    @model_validator(mode="after")
    def _overlap_below_size(self) -> IngestConfig:
        if self.chunk_size is not None and self.chunk_overlap is not None and self.chunk_overlap >= self.chunk_size:
            raise ValueError("config.chunk_overlap must be below config.chunk_size")
        return self

    def sizes(self, default_size: int, default_overlap: int) -> tuple[int, int]:
        """(chunk_size, chunk_overlap), the settings' where unset. A chunk_size below the default overlap
        overlaps by an eighth of itself (the defaults' ratio) unless chunk_overlap says otherwise."""
        size = self.chunk_size or default_size
        if self.chunk_overlap is not None:
            if self.chunk_overlap >= size:
                raise ValueError(
                    f"config.chunk_overlap ({self.chunk_overlap}) must be below the chunk size ({size}"
                    f"{'' if self.chunk_size else ', the server default'}); send a smaller overlap or a chunk_size"
                )
            return size, self.chunk_overlap
        return size, default_overlap if default_overlap < size else size // 8


class IngestOptions(TagsAndMetadata):
    """What every ingest request may say besides the document: labels, chunking, when it happened, tenant."""

    metadata: dict[str, Any] = Field(default_factory=dict, description="kept on the document and on every chunk")
    tags: list[str] = Field(default_factory=list)
    config: IngestConfig = Field(default_factory=IngestConfig)
    user_id: UserId | None = None
    occurred_at: datetime | None = Field(
        default=None,
        description="when what the document records happened (a meeting's date, a recording's time), ISO 8601, "
        "UTC if no zone; set on every chunk; default: when each chunk is stored",
    )

    _aware = field_validator("occurred_at")(lambda cls, value: assume_utc(value))

    def job_params(self) -> dict[str, Any]:
        """What the ingest worker needs besides the document itself."""
        params = {"metadata": self.metadata, "tags": self.tags, "config": self.config.model_dump(exclude_none=True)}
        if self.occurred_at is not None:
            params["occurred_at"] = self.occurred_at.isoformat()
        return params


class IngestRequest(IngestOptions):
    """A document in the request body: text as is, binary formats base64-encoded (OpenMemory's shape)."""

    content_type: str = Field(
        min_length=1,
        max_length=200,
        description='a format name ("pdf", "docx", "txt", "md", "html", "mp3", …) or MIME type',
    )
    data: str = Field(min_length=1, description="the document: base64, or plain text for txt/md/html")
    encoding: Literal["base64", "text"] | None = Field(
        default=None, description="how `data` is encoded; default: text for txt/md/html, base64 otherwise"
    )
    filename: str | None = Field(default=None, max_length=512)

    @field_validator("content_type", "filename")
    @classmethod
    def _stored_text(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else no_nul(value, info.field_name or "a field")


class IngestUrlRequest(IngestOptions):
    url: str = Field(min_length=1, max_length=2048, description="http(s) URL; fetched by the ingest worker")


def form_params(fields: dict[str, str]) -> IngestOptions:
    """The options of a multipart upload (metadata as JSON text, tags comma-separated, config fields flat), its
    `user_id` among them."""
    try:
        metadata = json.loads(fields["metadata"]) if fields.get("metadata") else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"metadata: not valid JSON ({exc})") from exc
    if not isinstance(metadata, dict):
        raise ValueError("metadata: must be a JSON object")
    config = {k: fields[k] for k in ("chunk_size", "chunk_overlap", "preserve_metadata") if fields.get(k)}
    tags = [t for t in (fields.get("tags") or "").split(",") if t.strip()]
    given = {name: fields[name] for name in ("occurred_at", "user_id") if fields.get(name)}
    return IngestOptions.model_validate({"metadata": metadata, "tags": tags, "config": config} | given)


class IngestAccepted(BaseModel):
    """202: the document is queued (or already known); follow `status_url`."""

    job_id: uuid.UUID | None
    document_id: uuid.UUID
    status: Literal["queued", "existing", "retried"]
    document_status: str
    format: str | None
    status_url: str | None
    document_url: str
    job: JobPublic | None = Field(default=None, description="the job's state at answer time, with ?wait=true")


class DocumentPublic(BaseModel):
    id: uuid.UUID
    user_id: str
    status: Literal["queued", "extracting", "embedding", "done", "failed", "duplicate", "cancelled"]
    source_type: str
    source_uri: str | None
    filename: str | None
    mime_type: str | None
    format: str | None
    byte_size: int | None
    chunk_count: int
    error: str | None
    metadata: dict[str, Any] = Field(description="the metadata sent with the document")
    extracted: dict[str, Any] = Field(description="what the parser found: title, pages, duration, …")
    stages_ms: dict[str, int] = Field(default_factory=dict)
    job_id: uuid.UUID | None
    duplicate_of: uuid.UUID | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: dict[str, Any]) -> DocumentPublic:
        meta = row.get("meta") or {}
        fields = {k: v for k, v in row.items() if k in cls.model_fields}
        return cls(
            **fields,
            metadata=meta.get("metadata") or {},
            extracted=meta.get("extracted") or {},
            stages_ms=meta.get("stages_ms") or {},
        )


class DocumentMemory(BaseModel):
    id: uuid.UUID
    chunk_index: int | None
    primary_sector: str
    preview: str


class DocumentDetail(DocumentPublic):
    memories: list[DocumentMemory]
    memories_total: int
    offset: int
    limit: int
    job: JobPublic | None = None


class DocumentPage(BaseModel):
    items: list[DocumentPublic]
    total: int
    offset: int
    limit: int
