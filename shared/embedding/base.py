"""The embedding provider interface: texts in, L2-normalised float32 rows out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class EmbeddingProvider(Protocol):
    name: str
    model: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Shape (len(texts), dim), float32, each row of unit length."""
        ...


@runtime_checkable
class ContextualEmbeddingProvider(EmbeddingProvider, Protocol):
    """A provider that can embed a text as read after some context (a conversation's previous turns)."""

    def embed_in_context(self, texts: Sequence[str], contexts: Sequence[str]) -> np.ndarray:
        """Like `embed`, each text's vector shaped by its context ("" for none): pooled from the text's own
        tokens as read after the context, so it leans towards what the text answers or continues."""
        ...


def embed_texts(embedder: EmbeddingProvider, texts: Sequence[str], contexts: Sequence[str] | None = None) -> np.ndarray:
    """`embed`, or `embed_in_context` when contexts are given, some is not empty and the provider can use them
    (providers behind an HTTP API, and static models, cannot: there the texts are embedded alone)."""
    if contexts is not None and len(contexts) != len(texts):
        raise ValueError(f"{len(contexts)} contexts for {len(texts)} texts")
    if contexts is not None and any(contexts) and isinstance(embedder, ContextualEmbeddingProvider):
        return embedder.embed_in_context(texts, contexts)
    return embedder.embed(texts)


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    """Each row scaled to unit length, as float32; all-zero rows stay zero."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.where(norms == 0, 1.0, norms)).astype(np.float32)


def mean_vector(vectors: np.ndarray) -> np.ndarray:
    """The re-normalised mean of the rows (OpenMemory's mean vector); zero if they cancel out."""
    rows = np.atleast_2d(np.asarray(vectors, dtype=np.float64))
    if rows.shape[0] == 0:
        raise ValueError("mean_vector needs at least one vector")
    return normalize_rows(rows.mean(axis=0, keepdims=True))[0]
