"""Embedding providers behind one small interface."""

from shared.embedding.base import EmbeddingProvider, mean_vector
from shared.embedding.synthetic import SyntheticEmbedder

__all__ = ["EmbeddingProvider", "SyntheticEmbedder", "mean_vector"]
