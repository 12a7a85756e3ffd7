"""Settings of ingestion (`ingest`): upload and chunk sizes, parser limits and sandbox, which URLs may be fetched.

Defaults live in shared.ingest.params.IngestParams, once (the architecture seed's §5 ingestion config).
"""

from __future__ import annotations

import ipaddress
from typing import Annotated

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import NoDecode

from shared.ingest.params import IngestParams

_INGEST = IngestParams()
_LAST_UID = 2**32 - 2  # (uid_t) -1 means "no change" to setresuid


class IngestSettings(BaseModel):
    ingest_max_bytes: int = Field(default=_INGEST.max_bytes, ge=1024, description="largest upload or fetched body")
    ingest_max_chars: int = Field(default=_INGEST.max_chars, ge=1000, description="characters of text per document")
    ingest_max_chunks: int = Field(default=_INGEST.max_chunks, ge=1, description="chunks (memories) per document")
    ingest_chunk_size: int = Field(default=_INGEST.chunk_size, ge=16, le=8192)
    ingest_chunk_overlap: int = Field(default=_INGEST.chunk_overlap, ge=0, le=4096)
    ingest_parse_timeout_seconds: float = Field(default=_INGEST.parse_timeout_seconds, gt=0)
    ingest_parse_memory_mb: int = Field(default=_INGEST.parse_memory_mb, ge=64)
    ingest_media_timeout_seconds: float = Field(default=_INGEST.media_timeout_seconds, gt=0)
    ingest_media_memory_mb: int = Field(default=_INGEST.media_memory_mb, ge=64)
    ingest_max_media_seconds: float = Field(
        default=_INGEST.max_media_seconds, gt=0, description="the longest audio or video transcribed"
    )
    ingest_parse_file_mb: int = Field(default=_INGEST.parse_file_mb, ge=1, description="RLIMIT_FSIZE of a parser")
    ingest_parse_output_mb: int = Field(default=_INGEST.parse_output_mb, ge=1, description="a parser's answer")
    ingest_parse_processes: int = Field(default=_INGEST.parse_processes, ge=16, description="RLIMIT_NPROC")
    ingest_sandbox_uid: int = Field(default=_INGEST.sandbox_uid, ge=1, le=_LAST_UID)
    ingest_sandbox_uids: int = Field(default=_INGEST.sandbox_uids, ge=1)
    # Unset: strict in production only (Settings.ingest decides, knowing the environment).
    ingest_sandbox_strict: bool | None = None
    ingest_group_documents: int = Field(
        default=_INGEST.group_documents, ge=1, le=64, description="small uploads parsed in one child (1: off)"
    )
    ingest_group_max_kb: int = Field(default=_INGEST.group_max_kb, ge=1, description="the largest upload grouped")
    ingest_fetch_timeout_seconds: float = Field(default=_INGEST.fetch_timeout_seconds, gt=0)
    ingest_allow_private_urls: bool = _INGEST.allow_private_urls
    ingest_allowed_networks: Annotated[list[str], NoDecode] = Field(default_factory=list)
    ingest_wait_max_seconds: float = Field(default=_INGEST.wait_max_seconds, ge=0)
    ingest_max_queued: int = Field(
        default=_INGEST.max_queued, ge=1, description="documents a tenant may have waiting to be ingested"
    )

    @field_validator("ingest_allowed_networks", mode="before")
    @classmethod
    def _parse_networks(cls, value: object) -> object:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, list):
            for network in value:
                try:
                    ipaddress.ip_network(network)
                except ValueError as exc:
                    raise ValueError(
                        f"MNEMOFLOW_INGEST_ALLOWED_NETWORKS: {network!r} is not a network ({exc})"
                    ) from exc
        return value

    @model_validator(mode="after")
    def _check_uids(self) -> IngestSettings:
        if self.ingest_sandbox_uid + self.ingest_sandbox_uids - 1 > _LAST_UID:
            raise ValueError("MNEMOFLOW_INGEST_SANDBOX_UID + MNEMOFLOW_INGEST_SANDBOX_UIDS runs past the last uid")
        return self

    @property
    def ingest(self) -> IngestParams:
        return IngestParams(
            max_bytes=self.ingest_max_bytes,
            max_chars=self.ingest_max_chars,
            max_chunks=self.ingest_max_chunks,
            chunk_size=self.ingest_chunk_size,
            chunk_overlap=self.ingest_chunk_overlap,
            parse_timeout_seconds=self.ingest_parse_timeout_seconds,
            parse_memory_mb=self.ingest_parse_memory_mb,
            media_timeout_seconds=self.ingest_media_timeout_seconds,
            media_memory_mb=self.ingest_media_memory_mb,
            max_media_seconds=self.ingest_max_media_seconds,
            parse_file_mb=self.ingest_parse_file_mb,
            parse_output_mb=self.ingest_parse_output_mb,
            parse_processes=self.ingest_parse_processes,
            sandbox_uid=self.ingest_sandbox_uid,
            sandbox_uids=self.ingest_sandbox_uids,
            sandbox_strict=bool(self.ingest_sandbox_strict),
            group_documents=self.ingest_group_documents,
            group_max_kb=self.ingest_group_max_kb,
            fetch_timeout_seconds=self.ingest_fetch_timeout_seconds,
            allow_private_urls=self.ingest_allow_private_urls,
            allowed_networks=tuple(self.ingest_allowed_networks),
            wait_max_seconds=self.ingest_wait_max_seconds,
            max_queued=self.ingest_max_queued,
        )
