"""Request and response shapes of the ingest and document routes (OpenMemory's ingest request shapes)."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from shared.schemas import JobPublic, TagsAndMetadata, UserId


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


class _IngestCommon(TagsAndMetadata):
    metadata: dict[str, Any] = Field(default_factory=dict, description="kept on the document and on every chunk")
    tags: list[str] = Field(default_factory=list)
    config: IngestConfig = Field(default_factory=IngestConfig)
    user_id: UserId | None = Field(default=None, min_length=1, max_length=256)

    def job_params(self) -> dict[str, Any]:
        """What the ingest worker needs besides the document itself."""
        return {"metadata": self.metadata, "tags": self.tags, "config": self.config.model_dump(exclude_none=True)}


class IngestRequest(_IngestCommon):
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


class IngestUrlRequest(_IngestCommon):
    url: str = Field(min_length=1, max_length=2048, description="http(s) URL; fetched by the ingest worker")


def form_params(fields: dict[str, str]) -> _IngestCommon:
    """The options of a multipart upload (metadata as JSON text, tags comma-separated, config fields flat)."""
    try:
        metadata = json.loads(fields["metadata"]) if fields.get("metadata") else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"metadata: not valid JSON ({exc})") from exc
    if not isinstance(metadata, dict):
        raise ValueError("metadata: must be a JSON object")
    config = {k: fields[k] for k in ("chunk_size", "chunk_overlap", "preserve_metadata") if fields.get(k)}
    tags = [t for t in (fields.get("tags") or "").split(",") if t.strip()]
    return _IngestCommon(metadata=metadata, tags=tags, config=IngestConfig.model_validate(config))


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
    status: Literal["queued", "extracting", "embedding", "done", "failed", "duplicate"]
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
