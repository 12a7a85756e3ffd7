"""Settings of the embedding providers, the vector index and the caches in front of them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import NoDecode

from shared.config.parsing import env, pairs
from shared.embedding.params import PROVIDERS, EmbeddingParams, EmbedMode, Provider
from shared.memory.sectors import SECTORS
from shared.memory.sequence import SequenceContext

_EMBEDDING = EmbeddingParams()
_CONTEXT = SequenceContext()


class EmbeddingSettings(BaseModel):
    if TYPE_CHECKING:  # a field of ServerSettings; the composed Settings has both
        data_dir: Path

    # Providers (`embedding`)
    embedding_provider: Provider = Field(
        default=_EMBEDDING.provider, validation_alias=env("MNEMOFLOW_EMBEDDING_PROVIDER", "OM_EMBEDDINGS")
    )
    embed_mode: EmbedMode = Field(
        default=_EMBEDDING.mode, validation_alias=env("MNEMOFLOW_EMBED_MODE", "OM_EMBED_MODE")
    )
    sector_providers: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, validation_alias=env("MNEMOFLOW_SECTOR_PROVIDERS")
    )
    vector_dim: int | None = Field(
        default=_EMBEDDING.vector_dim, ge=8, le=4000, validation_alias=env("MNEMOFLOW_VECTOR_DIM", "OM_VEC_DIM")
    )
    local_window_tokens: int = Field(default=_EMBEDDING.local_window_tokens, ge=8, le=512)
    local_overlap_tokens: int = Field(default=_EMBEDDING.local_overlap_tokens, ge=0)
    local_batch_size: int = Field(default=_EMBEDDING.local_batch_size, ge=1)
    local_threads: int = Field(default=_EMBEDDING.local_threads, ge=1)
    static_model_path: Path | None = None
    openai_base_url: str = Field(default=_EMBEDDING.openai_base_url, validation_alias=env("OPENAI_BASE_URL"))
    openai_api_key: SecretStr | None = Field(default=None, validation_alias=env("OPENAI_API_KEY"))
    openai_model: str = Field(default=_EMBEDDING.openai_model, validation_alias=env("MNEMOFLOW_OPENAI_MODEL"))
    ollama_url: str = Field(default=_EMBEDDING.ollama_url, validation_alias=env("OLLAMA_URL"))
    ollama_model: str = Field(default=_EMBEDDING.ollama_model, validation_alias=env("MNEMOFLOW_OLLAMA_MODEL"))
    http_embed_batch_size: int = Field(default=_EMBEDDING.http_batch_size, ge=1)
    http_embed_timeout_seconds: float = Field(default=_EMBEDDING.http_timeout_seconds, gt=0)
    http_embed_max_attempts: int = Field(default=_EMBEDDING.http_max_attempts, ge=1)
    http_window_tokens: int = Field(default=_EMBEDDING.http_window_tokens, ge=16)
    http_overlap_tokens: int = Field(default=_EMBEDDING.http_overlap_tokens, ge=0)

    # A memory that follows others in a sequence (a batch with `sequence: true`, an add with `follows`) is
    # embedded after this many of the turns before it (`context`; see shared.memory.sequence); 0: alone.
    embed_context_turns: int = Field(default=_CONTEXT.turns, ge=0, le=16)
    embed_context_chars: int = Field(default=_CONTEXT.chars, ge=0, le=100_000)

    # The vector index (one HNSW graph per dimension)
    hnsw_m: int = Field(default=16, ge=4, le=100)
    hnsw_ef_construction: int = Field(default=64, ge=8, le=1000)
    hnsw_ef_search: int = Field(default=64, ge=1, le=1000)

    # Bookkeeping and caches
    embed_log_retention_days: float = Field(default=30.0, gt=0)
    reembed_chunk_size: int = Field(default=500, ge=1, le=10_000)
    query_embedding_cache_ttl_seconds: int = Field(default=86_400, ge=0, description="0 turns the cache off")
    hot_row_cache_ttl_seconds: int = Field(
        default=3600, ge=0, description="hot-tier memory payloads kept in Redis for queries; 0 turns it off"
    )

    @field_validator("sector_providers", mode="before")
    @classmethod
    def _parse_sector_providers(cls, value: object) -> object:
        value = pairs(value, "MNEMOFLOW_SECTOR_PROVIDERS", "sector=provider")
        if isinstance(value, dict):
            for sector, provider in value.items():
                if sector not in SECTORS:
                    raise ValueError(
                        f"MNEMOFLOW_SECTOR_PROVIDERS: unknown sector {sector!r}; one of {', '.join(SECTORS)}"
                    )
                if provider not in PROVIDERS:
                    raise ValueError(
                        f"MNEMOFLOW_SECTOR_PROVIDERS: unknown provider {provider!r} for {sector}; "
                        f"one of {', '.join(PROVIDERS)}"
                    )
        return value

    def provider_for(self, sector: str) -> str:
        """The embedding provider of one sector (advanced mode may give a sector its own)."""
        return self.embedding.provider_for(sector)

    @property
    def resolved_static_model_path(self) -> Path:
        """The static model's directory: MNEMOFLOW_STATIC_MODEL_PATH, or where `make static-model` puts it."""
        return self.static_model_path or self.data_dir / "models" / "minilm-static-256"

    @property
    def embedding(self) -> EmbeddingParams:
        key = self.openai_api_key
        return EmbeddingParams(
            provider=self.embedding_provider,
            mode=self.embed_mode,
            sector_providers=dict(self.sector_providers),
            vector_dim=self.vector_dim,
            local_window_tokens=self.local_window_tokens,
            local_overlap_tokens=self.local_overlap_tokens,
            local_batch_size=self.local_batch_size,
            local_threads=self.local_threads,
            static_model_path=self.resolved_static_model_path,
            openai_base_url=self.openai_base_url,
            openai_api_key=key.get_secret_value() if key else None,
            openai_model=self.openai_model,
            ollama_url=self.ollama_url,
            ollama_model=self.ollama_model,
            http_batch_size=self.http_embed_batch_size,
            http_timeout_seconds=self.http_embed_timeout_seconds,
            http_max_attempts=self.http_embed_max_attempts,
            http_window_tokens=self.http_window_tokens,
            http_overlap_tokens=self.http_overlap_tokens,
        )

    @property
    def context(self) -> SequenceContext:
        return SequenceContext(turns=self.embed_context_turns, chars=self.embed_context_chars)
