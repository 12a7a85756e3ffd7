"""Build the configured embedding provider."""

from __future__ import annotations

from shared.config import Settings
from shared.embedding.base import EmbeddingProvider
from shared.embedding.synthetic import SyntheticEmbedder


def create_embedder(settings: Settings) -> EmbeddingProvider:
    if settings.embedding_provider == "synthetic":
        return SyntheticEmbedder(dim=settings.vector_dim)
    raise ValueError(f"unknown embedding provider {settings.embedding_provider!r}")
