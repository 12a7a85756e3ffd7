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
    """Each row scaled to unit length, as float32; all-zero rows stay zero."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.where(norms == 0, 1.0, norms)).astype(np.float32)


def mean_vector(vectors: np.ndarray) -> np.ndarray:
    """The re-normalised mean of the rows (OpenMemory's mean vector); zero if they cancel out."""
    rows = np.atleast_2d(np.asarray(vectors, dtype=np.float64))
    if rows.shape[0] == 0:
        raise ValueError("mean_vector needs at least one vector")
    return normalize_rows(rows.mean(axis=0, keepdims=True))[0]
