"""Which embedding model a store's vectors come from (one per store)."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session

from shared.embedding import EmbeddingProvider
from shared.errors import Conflict


def ensure_store_model(session: Session, embedder: EmbeddingProvider) -> None:
    """Record the model on first use; refuse to run a different model against existing vectors."""
    session.execute(
        text(
            "INSERT INTO embedding_model (provider, model, dim) VALUES (:provider, :model, :dim) "
            "ON CONFLICT (singleton) DO NOTHING"
        ),
        {"provider": embedder.name, "model": embedder.model, "dim": embedder.dim},
    )
    row = session.execute(text("SELECT provider, model, dim FROM embedding_model")).one()
    if (row.model, row.dim) != (embedder.model, embedder.dim):
        raise Conflict(
            f"this store's vectors were made by {row.provider} model {row.model!r} ({row.dim} dimensions), "
            f"but the configured provider is {embedder.name} model {embedder.model!r} ({embedder.dim} dimensions). "
            f"Set MNEMOFLOW_EMBEDDING_PROVIDER={row.provider} to keep using this store, or point "
            "MNEMOFLOW_DATA_DIR / DATABASE_URL at a new one; re-embedding an existing store is not available yet."
        )
