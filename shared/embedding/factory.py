"""Build the configured embedding provider (or another one, for a re-embed)."""

from __future__ import annotations

from shared.config import PROVIDERS, Settings
from shared.embedding.base import EmbeddingProvider
from shared.embedding.synthetic import SyntheticEmbedder
from shared.sectors import SECTORS

SYNTHETIC_DEFAULT_DIM = 384


def create_embedder(settings: Settings) -> EmbeddingProvider:
    """The configured provider (MNEMOFLOW_EMBEDDING_PROVIDER)."""
    return embedder_for(settings, settings.embedding_provider, dim=settings.vector_dim)


def create_sector_embedders(
    settings: Settings, default: EmbeddingProvider | None = None
) -> dict[str, EmbeddingProvider]:
    """Sector -> provider: the default everywhere in simple mode; advanced mode's choices elsewhere.

    One instance per provider, shared by its sectors. MNEMOFLOW_VECTOR_DIM applies to HTTP providers only
    when another provider is the default (models that know their dimension use it).
    """
    default = default or create_embedder(settings)
    built: dict[str, EmbeddingProvider] = {settings.embedding_provider: default}
    out = {}
    for sector in SECTORS:
        name = settings.provider_for(sector)
        if name not in built:
            built[name] = embedder_for(
                settings, name, dim=settings.vector_dim if name in ("openai", "ollama") else None
            )
        out[sector] = built[name]
    return out


def embedder_for(settings: Settings, provider: str, *, dim: int | None) -> EmbeddingProvider:
    """Provider `provider` with this process's settings; `dim` is required only where the model cannot tell it.

    Models that know their dimension (local, static) refuse a `dim` that differs from it.
    """
    if provider == "synthetic":
        return SyntheticEmbedder(dim=dim or SYNTHETIC_DEFAULT_DIM)
    if provider == "local":
        from shared.embedding.local import LocalOnnxEmbedder

        return _checked(
            LocalOnnxEmbedder(
                window_tokens=settings.local_window_tokens,
                overlap_tokens=settings.local_overlap_tokens,
                batch_size=settings.local_batch_size,
                threads=settings.local_threads,
            ),
            dim,
        )
    if provider == "static":
        from shared.embedding.static import StaticEmbedder

        return _checked(StaticEmbedder(settings.resolved_static_model_path), dim)
    if provider in ("openai", "ollama"):
        from shared.embedding.http import HttpEmbedder

        if dim is None:
            raise ValueError(
                f"the {provider} provider needs MNEMOFLOW_VECTOR_DIM set to its model's dimension "
                "(e.g. 1536 for text-embedding-3-small, 768 for nomic-embed-text)"
            )
        openai = provider == "openai"
        key = settings.openai_api_key.get_secret_value() if openai and settings.openai_api_key else None
        return HttpEmbedder(
            api="openai" if openai else "ollama",
            base_url=settings.openai_base_url if openai else settings.ollama_url,
            model=settings.openai_model if openai else settings.ollama_model,
            dim=dim,
            api_key=key,
            batch_size=settings.http_embed_batch_size,
            timeout_seconds=settings.http_embed_timeout_seconds,
            max_attempts=settings.http_embed_max_attempts,
            window_tokens=settings.http_window_tokens,
            overlap_tokens=settings.http_overlap_tokens,
        )
    raise ValueError(f"unknown embedding provider {provider!r}; expected one of {', '.join(PROVIDERS)}")


def _checked(embedder: EmbeddingProvider, dim: int | None) -> EmbeddingProvider:
    if dim is not None and embedder.dim != dim:
        raise ValueError(
            f"the {embedder.name} model makes {embedder.dim}-dimensional vectors but MNEMOFLOW_VECTOR_DIM is "
            f"{dim}; set MNEMOFLOW_VECTOR_DIM={embedder.dim} or leave it unset"
        )
    return embedder
