"""Build the configured embedding provider (or another one, for a re-embed)."""

from __future__ import annotations

from shared.config import PROVIDERS, Settings
from shared.embedding.base import EmbeddingProvider
from shared.embedding.synthetic import SyntheticEmbedder
from shared.memory.sectors import SECTORS

SYNTHETIC_DEFAULT_DIM = 384


def create_embedder(settings: Settings) -> EmbeddingProvider:
    """The configured provider (MNEMOFLOW_EMBEDDING_PROVIDER)."""
    params = settings.embedding
    return embedder_for(settings, params.provider, dim=params.vector_dim)


def create_sector_embedders(
    settings: Settings, default: EmbeddingProvider | None = None
) -> dict[str, EmbeddingProvider]:
    """Sector -> provider: the default everywhere in simple mode; advanced mode's choices elsewhere.

    One instance per provider, shared by its sectors. MNEMOFLOW_VECTOR_DIM applies to HTTP providers only
    when another provider is the default (models that know their dimension use it).
    """
    params = settings.embedding
    default = default or create_embedder(settings)
    built: dict[str, EmbeddingProvider] = {params.provider: default}
    out = {}
    for sector in SECTORS:
        name = params.provider_for(sector)
        if name not in built:
            built[name] = embedder_for(settings, name, dim=params.vector_dim if name in ("openai", "ollama") else None)
        out[sector] = built[name]
    return out


def embedder_for(settings: Settings, provider: str, *, dim: int | None) -> EmbeddingProvider:
    """Provider `provider` with this process's settings; `dim` is required only where the model cannot tell it.

    Models that know their dimension (local, static) refuse a `dim` that differs from it.
    """
    p = settings.embedding
    if provider == "synthetic":
        return SyntheticEmbedder(dim=dim or SYNTHETIC_DEFAULT_DIM)
    if provider == "local":
        from shared.embedding.local import LocalOnnxEmbedder

        return _checked(
            LocalOnnxEmbedder(
                window_tokens=p.local_window_tokens,
                overlap_tokens=p.local_overlap_tokens,
                batch_size=p.local_batch_size,
                threads=p.local_threads,
            ),
            dim,
        )
    if provider == "static":
        from shared.embedding.static import StaticEmbedder

        return _checked(StaticEmbedder(p.static_model_path or settings.resolved_static_model_path), dim)
    if provider in ("openai", "ollama"):
        from shared.embedding.http import HttpEmbedder

        if dim is None:
            raise ValueError(
                f"the {provider} provider needs MNEMOFLOW_VECTOR_DIM set to its model's dimension "
                "(e.g. 1536 for text-embedding-3-small, 768 for nomic-embed-text)"
            )
        openai = provider == "openai"
        return HttpEmbedder(
            api="openai" if openai else "ollama",
            base_url=p.openai_base_url if openai else p.ollama_url,
            model=p.openai_model if openai else p.ollama_model,
            dim=dim,
            api_key=p.openai_api_key if openai else None,
            batch_size=p.http_batch_size,
            timeout_seconds=p.http_timeout_seconds,
            max_attempts=p.http_max_attempts,
            window_tokens=p.http_window_tokens,
            overlap_tokens=p.http_overlap_tokens,
        )
    raise ValueError(f"unknown embedding provider {provider!r}; expected one of {', '.join(PROVIDERS)}")


def _checked(embedder: EmbeddingProvider, dim: int | None) -> EmbeddingProvider:
    if dim is not None and embedder.dim != dim:
        raise ValueError(
            f"the {embedder.name} model makes {embedder.dim}-dimensional vectors but MNEMOFLOW_VECTOR_DIM is "
            f"{dim}; set MNEMOFLOW_VECTOR_DIM={embedder.dim} or leave it unset"
        )
    return embedder
