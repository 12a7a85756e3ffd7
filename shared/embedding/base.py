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


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    """Scale each row to unit length; all-zero rows stay zero."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.where(norms == 0, 1.0, norms)).astype(np.float32)


def mean_vector(vectors: np.ndarray) -> np.ndarray:
    """The re-normalised mean of the rows (OpenMemory's mean vector over a memory's sector vectors)."""
    mean = np.asarray(vectors, dtype=np.float32).mean(axis=0, keepdims=True)
    return normalize_rows(mean)[0]
