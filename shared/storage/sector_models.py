"""Which embedding model made each sector's vectors, and the lock that keeps it so.

A store has one model per sector (the same one everywhere in simple mode). Writers hold a shared
advisory lock for their transaction and check that their models are the store's; a re-embed switches
models under the exclusive lock, after the last vector of another model is gone, so no vector of an
old model can land after the switch.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import text
from sqlalchemy.orm import Session

from shared.backpressure import NO_TIMEOUTS
from shared.config import Settings
from shared.db import set_timeouts
from shared.embedding import EmbeddingProvider
from shared.errors import Conflict
from shared.lifecycle.compression import dimension_ladder
from shared.memory.sectors import SECTORS
from shared.model.embedders import StoreModel
from shared.storage import locks
from shared.storage.locks import Lock
from shared.storage.vector_index import vector_indexes_ddl

SectorEmbedders = Mapping[str, EmbeddingProvider]


def per_sector(embedders: SectorEmbedders | EmbeddingProvider) -> dict[str, EmbeddingProvider]:
    """A provider for every sector: a single provider stands for all of them."""
    if isinstance(embedders, Mapping):
        return {sector: embedders[sector] for sector in SECTORS}
    return dict.fromkeys(SECTORS, embedders)


def current_models(session: Session) -> dict[str, StoreModel]:
    rows = session.execute(text("SELECT sector, provider, model, dim FROM sector_models")).all()
    return {r.sector: StoreModel(r.provider, r.model, int(r.dim)) for r in rows}


def _record(session: Session, embedders: Mapping[str, EmbeddingProvider]) -> None:
    session.execute(
        text(
            "INSERT INTO sector_models (sector, provider, model, dim) "
            "SELECT * FROM unnest(CAST(:sectors AS text[]), CAST(:providers AS text[]), CAST(:models AS text[]), "
            "CAST(:dims AS int[])) ON CONFLICT (sector) DO NOTHING"
        ),
        {
            "sectors": list(embedders),
            "providers": [e.name for e in embedders.values()],
            "models": [e.model for e in embedders.values()],
            "dims": [e.dim for e in embedders.values()],
        },
    )


def _check(store: Mapping[str, StoreModel], embedders: Mapping[str, EmbeddingProvider]) -> None:
    wrong = {
        sector: (store[sector], e)
        for sector, e in embedders.items()
        if sector in store and (store[sector].model, store[sector].dim) != (e.model, e.dim)
    }
    if not wrong:
        return
    groups: dict[tuple[StoreModel, StoreModel], list[str]] = {}
    for sector, (s, e) in wrong.items():
        groups.setdefault((s, StoreModel.of(e)), []).append(sector)
    described = "; ".join(
        f"{'every sector' if len(sectors) == len(SECTORS) else ', '.join(sectors)}: the store's vectors were made by "
        f"{s.provider} model {s.model!r} ({s.dim} dimensions), but the configured provider is {e.provider} model "
        f"{e.model!r} ({e.dim} dimensions)"
        for (s, e), sectors in groups.items()
    )
    providers = sorted({s.provider for s, _ in wrong.values()})
    keep = (
        f"Set MNEMOFLOW_EMBEDDING_PROVIDER={providers[0]}"
        if len(providers) == 1 and len(wrong) == len(SECTORS)
        else "Set MNEMOFLOW_EMBEDDING_PROVIDER / MNEMOFLOW_SECTOR_PROVIDERS to the store's models"
    )
    raise Conflict(
        f"{described}. {keep} to keep using this store, point MNEMOFLOW_DATA_DIR / DATABASE_URL at a new "
        "one, or convert it with `mnemoflow reembed` (run against the stack as it is configured now).",
        details={
            "store": {sector: s.__dict__ for sector, (s, _) in wrong.items()},
            "configured": {
                sector: {"provider": e.name, "model": e.model, "dim": e.dim} for sector, (_, e) in wrong.items()
            },
        },
    )


def ensure_vector_indexes(session: Session, dims: set[int], *, m: int, ef_construction: int) -> None:
    """The partial HNSW indexes of the vectors of each dimension in `dims`: the one graph for every sector, and each
    sector's (`shared.storage.vector_index`).

    Every process checks at start-up; only one that finds an index missing runs DDL, under one lock (the first
    start of a store, or a new model). The others read the catalogue and take no lock.
    """
    wanted = {name: ddl for dim in dims for name, ddl in vector_indexes_ddl(dim, m, ef_construction).items()}
    if not set(wanted) - _existing_indexes(session, list(wanted)):
        return
    # Building an index over existing vectors, or waiting for another process building one, may take minutes:
    # start-up must not give up on it (the engine's timeouts are a request's or a task's).
    set_timeouts(session, NO_TIMEOUTS)
    locks.hold_for_transaction(session, Lock.INDEX_DDL)  # concurrent DDL races
    for name in sorted(set(wanted) - _existing_indexes(session, list(wanted))):
        session.execute(text(wanted[name]))


def _existing_indexes(session: Session, names: list[str]) -> set[str]:
    rows = session.execute(
        text("SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND indexname = ANY(:names)"),
        {"names": names},
    ).scalars()
    return set(rows)


def ensure_store_model(
    session: Session,
    embedders: SectorEmbedders | EmbeddingProvider,
    *,
    hnsw_m: int = 16,
    hnsw_ef_construction: int = 64,
    min_dim: int = 64,
    max_dim: int = 1536,
) -> None:
    """Record the models on first use and index their dimensions — each model's own and the smaller rungs its
    vectors compress to (OM_MIN_VECTOR_DIM, OM_MAX_VECTOR_DIM) — and refuse other models against existing vectors."""
    chosen = per_sector(embedders)
    _record(session, chosen)
    _check(current_models(session), chosen)
    dims = {rung for e in chosen.values() for rung in dimension_ladder(e.dim, min_dim=min_dim, max_dim=max_dim)}
    ensure_vector_indexes(session, dims, m=hnsw_m, ef_construction=hnsw_ef_construction)


def ensure_store_model_for(
    session: Session, embedders: SectorEmbedders | EmbeddingProvider, settings: Settings
) -> None:
    """`ensure_store_model` with the index settings of `settings` (what every process does at start-up)."""
    ensure_store_model(
        session,
        embedders,
        hnsw_m=settings.hnsw_m,
        hnsw_ef_construction=settings.hnsw_ef_construction,
        min_dim=settings.min_vector_dim,
        max_dim=settings.max_vector_dim,
    )


def guard_store_model(session: Session, embedders: SectorEmbedders | EmbeddingProvider) -> None:
    """Before writing vectors: hold the shared lock until commit and check the writer's models are the store's.

    Two statements on purpose: a statement's snapshot predates a lock it waits for inside itself.
    """
    chosen = per_sector(embedders)
    locks.hold_for_transaction(session, Lock.STORE_MODEL, shared=True)
    store = current_models(session)
    if len(store) < len(SECTORS):
        _record(session, chosen)
        store = current_models(session)
    _check(store, chosen)


def lock_for_switch(session: Session) -> None:
    """The exclusive side of the lock: waits for in-flight writers, holds new ones until commit."""
    locks.hold_for_transaction(session, Lock.STORE_MODEL)


def switch_models(session: Session, targets: Mapping[str, StoreModel]) -> None:
    """Make `targets` the models of their sectors (call under `lock_for_switch`, once nothing else is left)."""
    for sector, target in targets.items():
        session.execute(
            text(
                "INSERT INTO sector_models (sector, provider, model, dim) VALUES (:sector, :provider, :model, :dim) "
                "ON CONFLICT (sector) DO UPDATE SET provider = EXCLUDED.provider, model = EXCLUDED.model, "
                "dim = EXCLUDED.dim, created_at = now()"
            ),
            {"sector": sector, "provider": target.provider, "model": target.model, "dim": target.dim},
        )
