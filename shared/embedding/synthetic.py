"""Deterministic hash embeddings: no model, same vector on every machine, words overlap → vectors overlap.

Feature hashing with a sign bit over lower-cased words (weight 1), word bigrams (0.5) and the
character trigrams of each word (0.25, so "running" and "runner" share features), sublinear tf.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from shared.embedding.base import normalize_rows

_WORD = re.compile(r"\w+", re.UNICODE)
WORD_WEIGHT, BIGRAM_WEIGHT, TRIGRAM_WEIGHT = 1.0, 0.5, 0.25


@lru_cache(maxsize=500_000)
def _slot(feature: str, dim: int) -> tuple[int, float]:
    """A feature's column and sign, from a stable hash (never Python's salted hash())."""
    value = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")
    return value % dim, 1.0 if value >> 63 else -1.0


def _features(text: str) -> Counter[str]:
    words = _WORD.findall(text.lower())
    weights: Counter[str] = Counter()
    for word in words:
        weights["w:" + word] += 1
        padded = f"<{word}>"
        for i in range(len(padded) - 2):
            weights["c:" + padded[i : i + 3]] += 1
    for left, right in itertools.pairwise(words):
        weights[f"b:{left} {right}"] += 1
    return weights


_KIND_WEIGHT = {"w": WORD_WEIGHT, "b": BIGRAM_WEIGHT, "c": TRIGRAM_WEIGHT}


class SyntheticEmbedder:
    """The `synthetic` provider: for tests and the highest-volume ingestion."""

    name = "synthetic"
    model = "synthetic-hash-v1"

    def __init__(self, dim: int = 384) -> None:
        if dim < 8:
            raise ValueError("dimension must be at least 8")
        self.dim = dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        matrix = np.zeros((len(texts), self.dim), dtype=np.float64)
        for row, text in enumerate(texts):
            features = _features(text)
            if not features:
                # A featureless text (empty, punctuation) still gets a stable non-zero vector.
                column, sign = _slot("empty:" + text, self.dim)
                matrix[row, column] = sign
                continue
            for feature, count in features.items():
                column, sign = _slot(feature, self.dim)
                matrix[row, column] += sign * _KIND_WEIGHT[feature[0]] * (1.0 + math.log(count))
        return normalize_rows(matrix)
