"""Deterministic hash embeddings: no model, same vector on every machine, shared words → similar vectors.

Feature hashing with a sign bit over lower-cased words (weight 1), word bigrams (0.5) and the
character trigrams of each word (0.25, so "running" and "runner" share features), with sublinear
tf (1 + log tf) and L2 normalisation. In context (a conversation's previous turns), a text's features are
joined by its context's at CONTEXT_WEIGHT: the text leans towards what it follows, as with the local model.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from shared.embedding.base import normalize_rows

_WORD = re.compile(r"\w+")
WORD_WEIGHT, BIGRAM_WEIGHT, TRIGRAM_WEIGHT = 1.0, 0.5, 0.25
CONTEXT_WEIGHT = 0.5
_SIGN_BIT = np.uint64(63)


@lru_cache(maxsize=1 << 18)
def _feature_hash(feature: str) -> int:
    """A stable 64-bit hash (never Python's per-process salted hash()): mod dim is the column, the top bit the sign."""
    return int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")


@lru_cache(maxsize=1 << 16)
def _word_hashes(word: str) -> tuple[int, tuple[int, ...]]:
    """The hash of the word itself and of each character trigram of `<word>`."""
    padded = f"<{word}>"
    trigrams = tuple(_feature_hash("c:" + padded[i : i + 3]) for i in range(len(padded) - 2))
    return _feature_hash("w:" + word), trigrams


def _weighted_counts(text: str) -> list[tuple[Counter[int], float]]:
    """Feature-hash counts of each kind, with the kind's weight."""
    words = _WORD.findall(text.lower())
    per_word = [_word_hashes(word) for word in words]
    word_counts = Counter(word_hash for word_hash, _ in per_word)
    trigram_counts = Counter(itertools.chain.from_iterable(trigrams for _, trigrams in per_word))
    bigram_counts = Counter([_feature_hash(f"b:{left} {right}") for left, right in itertools.pairwise(words)])
    return [(word_counts, WORD_WEIGHT), (bigram_counts, BIGRAM_WEIGHT), (trigram_counts, TRIGRAM_WEIGHT)]


class SyntheticEmbedder:
    """The `synthetic` provider: for tests and the highest-volume ingestion."""

    name = "synthetic"
    model = "synthetic-hash-v1"

    def __init__(self, dim: int = 384) -> None:
        if dim < 8:
            raise ValueError(f"dimension must be at least 8, got {dim}")
        self.dim = dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One unit-length float32 row per text."""
        rows: list[int] = []
        hashes: list[int] = []
        counts: list[int] = []
        weights: list[float] = []
        for row, text in enumerate(texts):
            for counter, weight in _weighted_counts(text):
                rows.extend(itertools.repeat(row, len(counter)))
                hashes.extend(counter.keys())
                counts.extend(counter.values())
                weights.extend(itertools.repeat(weight, len(counter)))
        hash_array = np.array(hashes, dtype=np.uint64)
        columns = (hash_array % np.uint64(self.dim)).astype(np.int64)
        signs = np.where(hash_array >> _SIGN_BIT, 1.0, -1.0)
        values = signs * np.array(weights) * (1.0 + np.log(np.array(counts, dtype=np.float64)))
        flat = np.array(rows, dtype=np.int64) * self.dim + columns
        matrix = np.bincount(flat, weights=values, minlength=len(texts) * self.dim).reshape(len(texts), self.dim)
        # Featureless text ("", "!!!") or features cancelling out: a fixed unit vector from the text itself.
        for blank in np.flatnonzero(~matrix.any(axis=1)).tolist():
            fallback = _feature_hash("empty:" + texts[blank])
            matrix[blank, fallback % self.dim] = 1.0 if fallback >> 63 else -1.0
        return normalize_rows(matrix)

    def embed_in_context(self, texts: Sequence[str], contexts: Sequence[str]) -> np.ndarray:
        """normalise(text + CONTEXT_WEIGHT × context) for texts with a context; `embed` for the others."""
        if len(contexts) != len(texts):
            raise ValueError(f"{len(contexts)} contexts for {len(texts)} texts")
        own = self.embed(texts)
        with_context = [i for i, context in enumerate(contexts) if context]
        if with_context:
            leaning = own[with_context] + CONTEXT_WEIGHT * self.embed([contexts[i] for i in with_context])
            own[with_context] = normalize_rows(leaning)
        return own
