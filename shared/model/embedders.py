"""Which embedding model made a sector's vectors: the provider, the model's name and its dimension."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class Described(Protocol):
    """What an embedding provider says of itself (`shared.embedding.base.EmbeddingProvider` does)."""

    @property
    def name(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def dim(self) -> int: ...


@dataclass(frozen=True)
class StoreModel:
    """The model a store's vectors of a sector were made by (a row of `sector_models`), or a provider would make."""

    provider: str
    model: str
    dim: int

    @classmethod
    def of(cls, embedder: Described) -> StoreModel:
        return cls(embedder.name, embedder.model, embedder.dim)
