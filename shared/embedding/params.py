"""Which embedding provider each sector uses and how each provider is driven (`Settings.embedding`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from shared.api.common import Provider

EmbedMode = Literal["simple", "advanced"]
PROVIDERS: tuple[str, ...] = get_args(Provider)


@dataclass(frozen=True)
class EmbeddingParams:
    """Defaults: the local MiniLM model for every sector (OpenMemory's OM_EMBEDDINGS / OM_EMBED_MODE work)."""

    provider: Provider = "local"
    # Architecture seed: simple = one model for every sector; advanced = a model per sector where
    # `sector_providers` says so ("procedural=local,episodic=static"), the default elsewhere.
    mode: EmbedMode = "simple"
    sector_providers: Mapping[str, str] = field(default_factory=dict)
    # The model's own dimension when unset; required for HTTP providers (their servers decide it).
    vector_dim: int | None = None
    # local provider (MiniLM ONNX): tokens per window (model limit 512; trained on 256), window overlap
    local_window_tokens: int = 256
    local_overlap_tokens: int = 50
    local_batch_size: int = 32
    local_threads: int = 1
    # static provider (model2vec-style, distilled from MiniLM by `make static-model`): its model directory
    static_model_path: Path | None = None
    # HTTP providers (OpenAI-compatible /v1/embeddings, Ollama's /api/embed); keys never logged
    openai_base_url: str = "https://api.openai.com"
    openai_api_key: str | None = field(default=None, repr=False)
    openai_model: str = "text-embedding-3-small"
    ollama_url: str = "http://localhost:11434"
    ollama_model: str = "nomic-embed-text"
    http_batch_size: int = 128
    http_timeout_seconds: float = 30.0
    http_max_attempts: int = 5
    # Texts longer than a window (estimated tokens) are split with overlap and mean-pooled (architecture seed)
    http_window_tokens: int = 512
    http_overlap_tokens: int = 50

    def provider_for(self, sector: str) -> str:
        """The embedding provider of one sector (advanced mode may give a sector its own)."""
        if self.mode == "advanced":
            return self.sector_providers.get(sector, self.provider)
        return self.provider
