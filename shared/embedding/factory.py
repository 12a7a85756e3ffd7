"""Build the configured embedding provider."""

from __future__ import annotations

from shared.config import Settings
from shared.embedding.base import EmbeddingProvider
from shared.embedding.synthetic import SyntheticEmbedder


def create_embedder(settings: Settings) -> EmbeddingProvider:
    """The configured provider; its dimension must be the store's (MNEMOFLOW_VECTOR_DIM)."""
    if settings.embedding_provider == "synthetic":
        return SyntheticEmbedder(dim=settings.vector_dim)
    if settings.embedding_provider == "local":
        from shared.embedding.local import LocalOnnxEmbedder

        embedder = LocalOnnxEmbedder(
            window_tokens=settings.local_window_tokens,
            overlap_tokens=settings.local_overlap_tokens,
            batch_size=settings.local_batch_size,
            threads=settings.local_threads,
        )
        if embedder.dim != settings.vector_dim:
            raise ValueError(
                f"the local model makes {embedder.dim}-dimensional vectors but MNEMOFLOW_VECTOR_DIM is "
                f"{settings.vector_dim}; set MNEMOFLOW_VECTOR_DIM={embedder.dim} for a new store"
            )
        return embedder
    if settings.embedding_provider in ("openai", "ollama"):
        from shared.embedding.http import HttpEmbedder

        openai = settings.embedding_provider == "openai"
        key = settings.openai_api_key.get_secret_value() if openai and settings.openai_api_key else None
        return HttpEmbedder(
            api=settings.embedding_provider,
            base_url=settings.openai_base_url if openai else settings.ollama_url,
            model=settings.openai_model if openai else settings.ollama_model,
            dim=settings.vector_dim,
            api_key=key,
            batch_size=settings.http_embed_batch_size,
            timeout_seconds=settings.http_embed_timeout_seconds,
            max_attempts=settings.http_embed_max_attempts,
        )
    raise ValueError(f"unknown embedding provider {settings.embedding_provider!r}")
