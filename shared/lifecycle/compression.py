"""What decay does to an unused memory's vectors and summary (decay seed, "Compression Mechanics").

Pure: the dimension ladder and mean-pooling (memories and queries alike), fingerprints, and the layered summary
compression. They run in Python for the few rows that compress each cycle (`shared.lifecycle.decay_cycle`).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

FULL, COMPRESSED, FINGERPRINTED = "full", "compressed", "fingerprinted"


@dataclass(frozen=True)
class CompressionRules:
    """Decay seed, "Compression Mechanics"; OpenMemory's OM_* settings set them (`Settings.compression`)."""

    compress_below: float = 0.7  # pool the vectors and condense the summary when the decay factor f < 0.7
    cold_threshold: float = 0.25  # fingerprint when f < OM_DECAY_COLD_THRESHOLD
    min_dim: int = 64  # OM_MIN_VECTOR_DIM: the smallest rung a vector is pooled to
    max_dim: int = 1536  # OM_MAX_VECTOR_DIM
    fingerprint_dim: int = 32
    summary_layers: int = 3  # OM_SUMMARY_LAYERS (see compress_summary)

    def ladder(self, full_dim: int) -> list[int]:
        """The rungs a model's vectors of `full_dim` dimensions compress to, largest first."""
        return dimension_ladder(full_dim, min_dim=self.min_dim, max_dim=self.max_dim)


def dimension_ladder(full_dim: int, *, min_dim: int, max_dim: int) -> list[int]:
    """The dimensions a compressed vector may take, largest first: the model's own, then halvings ≥ `min_dim`.

    Decay seed, "Vector Compression": mean-pool to floor(dim × f), never below OM_MIN_VECTOR_DIM, never above
    OM_MAX_VECTOR_DIM. Snapping to halvings keeps two properties the seed's free choice of dimension lacks:
    each rung has its own HNSW index (a handful of indexes, not one per possible width), and a vector pooled
    rung by rung equals the full vector pooled in one step, so the query pooled the same way is comparable.
    """
    rungs = [full_dim]
    dim = full_dim
    while (dim + 1) // 2 >= min_dim:
        dim = (dim + 1) // 2
        if dim <= max_dim:
            rungs.append(dim)
    return rungs


def compression_target(current_dim: int, full_dim: int, factor: float, ladder: Sequence[int]) -> int:
    """The rung a vector compresses to at decay factor `f`: the largest rung ≤ floor(full_dim × f) (the seed's
    target), at least the smallest rung, never larger than where the vector already is."""
    wanted = math.floor(full_dim * factor)
    fitting = [r for r in ladder if r <= wanted and r < full_dim]
    target = max(fitting) if fitting else min(ladder)
    return min(target, current_dim)


def halve(vector: np.ndarray) -> np.ndarray:
    """Mean of adjacent pairs (the seed's bucket pooling with bucket size 2; an odd tail stays alone)."""
    n = vector.shape[-1]
    if n % 2:
        padded = np.concatenate([vector, vector[..., -1:]], axis=-1)  # the tail's mean with itself is itself
        return padded.reshape(*vector.shape[:-1], (n + 1) // 2, 2).mean(axis=-1)
    return vector.reshape(*vector.shape[:-1], n // 2, 2).mean(axis=-1)


def pool_to(vectors: np.ndarray, dim: int) -> np.ndarray:
    """Mean-pool (rows of) vectors down the ladder to `dim` and L2-normalise — for memories and queries alike."""
    out = np.asarray(vectors, dtype=np.float32)
    while out.shape[-1] > dim:
        out = halve(out)
    if out.shape[-1] != dim:
        raise ValueError(f"{dim} is not on the halving ladder of a {vectors.shape[-1]}-dimensional vector")
    norms = np.linalg.norm(out, axis=-1, keepdims=True)
    return (out / np.where(norms == 0, 1.0, norms)).astype(np.float32)


def fingerprint_vector(memory_id: str, summary: str, dim: int = 32) -> np.ndarray:
    """Decay seed, "Fingerprinting": hash_to_vec(id + summary, 32) — a deterministic unit vector from SHA-256.

    It identifies, it does not mean: it is kept on the memory's row and never searched (a hash is no
    embedding); the memory stays findable through full text over its original content and through its
    waypoints, and a hit regenerates the real embedding.
    """
    seed = hashlib.sha256(f"{memory_id}{summary}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(seed[:8], "big"))
    vector = rng.standard_normal(dim).astype(np.float32)
    return vector / np.linalg.norm(vector)


_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+|\n+")
STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being below between both
    but by can could did do does doing down during each few for from further had has have having he her here hers
    herself him himself his how i if in into is it its itself just let me more most my myself no nor not now of
    off on once only or other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up very was we were what
    when where which while who whom why will with would you your yours yourself yourselves also get got like one
    really still well yeah oh ok okay s t don didn doesn isn wasn aren weren won wouldn couldn shouldn ll ve re d
    m
    """.split()  # noqa: SIM905
)


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def top_keywords(text: str, n: int) -> list[str]:
    """The `n` most frequent non-stopwords (ties: first seen first), lower-cased."""
    counts = Counter(w for w in words(text) if w not in STOPWORDS and len(w) > 1 and not w.isdigit())
    first_seen = {w: i for i, w in reversed(list(enumerate(words(text))))}
    ranked = sorted(counts, key=lambda w: (-counts[w], first_seen[w]))
    return ranked[:n]


def top_sentences(text: str, n: int) -> list[str]:
    """The `n` sentences that carry the text's most frequent keywords, in reading order (extractive summary)."""
    sentences = [s.strip() for s in _SENTENCE.split(text) if s.strip()]
    if len(sentences) <= n:
        return sentences
    counts = Counter(w for w in words(text) if w not in STOPWORDS)

    def weight(sentence: str) -> float:
        tokens = [w for w in words(sentence) if w not in STOPWORDS]
        return sum(counts[w] for w in tokens) / math.sqrt(len(tokens) or 1)

    best = sorted(range(len(sentences)), key=lambda i: (-weight(sentences[i]), i))[:n]
    return [sentences[i] for i in sorted(best)]


def compress_summary(original: str, factor: float, *, layers: int = 3) -> str:
    """Decay seed, "Summary Compression": f > 0.8 truncate to 200 characters; f > 0.4 the top 3 sentences cut to
    80 characters; otherwise the top 5 keywords. OM_SUMMARY_LAYERS (1-3) keeps only the most compressive layers:
    3 = all three, 2 = extractive and keywords, 1 = keywords only."""
    if layers >= 3 and factor > 0.8:
        return original if len(original) <= 200 else original[:200] + "..."
    if layers >= 2 and factor > 0.4:
        return " ".join(top_sentences(original, 3))[:80]
    return " ".join(top_keywords(original, 5))


def fingerprint_summary(content: str) -> str:
    """Decay seed, "Fingerprinting": the content's top 3 keywords."""
    return " ".join(top_keywords(content, 3))
