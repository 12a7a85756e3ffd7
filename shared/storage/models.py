"""Which embedding model a store's vectors come from (one per store), and the lock that keeps it so.

Writers hold a shared advisory lock on the store's model for their transaction and check that their
model is the store's; a re-embed switches the model under the exclusive lock, after the last vector
of the old model is gone, so no old-model vector can land after the switch.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.orm import Session

from shared.embedding import EmbeddingProvider
from shared.errors import Conflict
from shared.sectors import SECTORS
from shared.storage.vector_index import create_vector_index_sql

STORE_MODEL_LOCK = 727276
INDEX_DDL_LOCK = 727277


@dataclass(frozen=True)
class StoreModel:
    provider: str
    model: str
    dim: int


def current_model(session: Session) -> StoreModel | None:
    row = session.execute(text("SELECT provider, model, dim FROM embedding_model")).first()
    return StoreModel(row.provider, row.model, int(row.dim)) if row else None


def _mismatch(store: StoreModel, embedder: EmbeddingProvider) -> Conflict:
    return Conflict(
        f"this store's vectors were made by {store.provider} model {store.model!r} ({store.dim} dimensions), "
        f"but the configured provider is {embedder.name} model {embedder.model!r} ({embedder.dim} dimensions). "
        f"Set MNEMOFLOW_EMBEDDING_PROVIDER={store.provider} to keep using this store, point "
        "MNEMOFLOW_DATA_DIR / DATABASE_URL at a new one, or convert this one with "
        f"`mnemoflow reembed --provider {embedder.name}` (run it against the stack as it is configured now).",
        details={"store": store.__dict__, "configured": {"provider": embedder.name, "model": embedder.model}},
    )


def ensure_vector_indexes(session: Session, dim: int, *, m: int, ef_construction: int) -> None:
    """The partial HNSW index of every sector partition for vectors of `dim` dimensions."""
    session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": INDEX_DDL_LOCK})  # concurrent DDL races
    for sector in SECTORS:
        session.execute(text(create_vector_index_sql(sector, dim, m, ef_construction)))


def ensure_store_model(
    session: Session, embedder: EmbeddingProvider, *, hnsw_m: int = 16, hnsw_ef_construction: int = 64
) -> None:
    """Record the model on first use and index its dimension; refuse a different model against existing vectors."""
    session.execute(
        text(
            "INSERT INTO embedding_model (provider, model, dim) VALUES (:provider, :model, :dim) "
            "ON CONFLICT (singleton) DO NOTHING"
        ),
        {"provider": embedder.name, "model": embedder.model, "dim": embedder.dim},
    )
    store = current_model(session)
    assert store is not None
    if (store.model, store.dim) != (embedder.model, embedder.dim):
        raise _mismatch(store, embedder)
    ensure_vector_indexes(session, embedder.dim, m=hnsw_m, ef_construction=hnsw_ef_construction)


def guard_store_model(session: Session, embedder: EmbeddingProvider) -> None:
    """Before writing vectors: hold the shared lock until commit and check the writer's model is the store's.

    Two statements on purpose: a statement's snapshot predates a lock it waits for inside itself.
    """
    session.execute(text("SELECT pg_advisory_xact_lock_shared(:k)"), {"k": STORE_MODEL_LOCK})
    store = current_model(session)
    if store is None:
        session.execute(
            text(
                "INSERT INTO embedding_model (provider, model, dim) VALUES (:provider, :model, :dim) "
                "ON CONFLICT (singleton) DO NOTHING"
            ),
            {"provider": embedder.name, "model": embedder.model, "dim": embedder.dim},
        )
        store = current_model(session)
        assert store is not None
    if (store.model, store.dim) != (embedder.model, embedder.dim):
        raise _mismatch(store, embedder)


def lock_for_switch(session: Session) -> None:
    """The exclusive side of the lock: waits for in-flight writers, holds new ones until commit."""
    session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": STORE_MODEL_LOCK})


def switch_model(session: Session, target: StoreModel) -> None:
    """Make `target` the store's model (call under `lock_for_switch`, once no other model's vectors remain)."""
    session.execute(
        text(
            "INSERT INTO embedding_model (provider, model, dim) VALUES (:provider, :model, :dim) "
            "ON CONFLICT (singleton) DO UPDATE SET provider = EXCLUDED.provider, model = EXCLUDED.model, "
            "dim = EXCLUDED.dim, created_at = now()"
        ),
        {"provider": target.provider, "model": target.model, "dim": target.dim},
    )
