"""The memory lifecycle's arithmetic: tiers, decay factor, salience, vector and summary compression, fingerprints.

Pure functions, each naming the seed rule it follows. The decay cycle (`shared.lifecycle`) runs the tier and
decay formulas in SQL for whole batches (`shared.storage.decay` mirrors them, and a test checks the two
agree); the vector and text transforms below run in Python for the few rows that compress each cycle.

Sources: `openmemory-decay-algorithm.txt` (the decay seed) and `openmemory-architecture.txt` (sector rates).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shared.sectors import SECTOR_CONFIGS

HOT, WARM, COLD = "hot", "warm", "cold"
FULL, COMPRESSED, FINGERPRINTED = "full", "compressed", "fingerprinted"

# Architecture seed §2.3: sector-specific rates, episodic fast, reflective slow. The tier's λ is scaled by the
# memory's sector rate relative to the mean of the five, so the seed's tier λ holds for the average sector.
# PostgreSQL raises on float underflow where Python quietly gives 0: the factor is floored at e^-60 and a
# salience below 1e-9 is stored as 0 (both far below any threshold that matters), here and in the SQL alike.
MIN_EXPONENT = -60.0
SALIENCE_FLOOR = 1e-9
MEAN_SECTOR_LAMBDA = sum(c.decay_lambda for c in SECTOR_CONFIGS.values()) / len(SECTOR_CONFIGS)


@dataclass(frozen=True)
class TierRules:
    """Decay seed, "Three-Tier System". Defaults are the seed's; every value is a setting."""

    recent_days: float = 6.0
    hot_coactivations: int = 5
    hot_salience: float = 0.7
    warm_salience: float = 0.4
    hot_lambda: float = 0.005
    warm_lambda: float = 0.02
    cold_lambda: float = 0.05

    def lambda_of(self, tier: str) -> float:
        return {HOT: self.hot_lambda, WARM: self.warm_lambda, COLD: self.cold_lambda}[tier]


def clamp01(value: float) -> float:
    return min(1.0, max(0.0, value))


def effective_salience(salience: float, coactivations: int) -> float:
    """Decay seed, "Salience Calculation": clamp(base × (1 + ln(1 + coactivations))).

    The stored salience is the base; this boosted value is what tiering and the decay factor see.
    """
    return clamp01(salience * (1.0 + math.log1p(max(0, coactivations))))


def classify_tier(days_since_seen: float, salience: float, coactivations: int, rules: TierRules) -> str:
    """Decay seed: hot = seen < 6 days AND (coactivations > 5 OR salience > 0.7); warm = seen < 6 days OR
    salience > 0.4; cold otherwise."""
    recent = days_since_seen < rules.recent_days
    if recent and (coactivations > rules.hot_coactivations or salience > rules.hot_salience):
        return HOT
    if recent or salience > rules.warm_salience:
        return WARM
    return COLD


def sector_scale(decay_lambda: float) -> float:
    """Architecture seed §2.3: a memory's sector rate relative to the mean sector rate (1.0 = the tier's λ)."""
    return decay_lambda / MEAN_SECTOR_LAMBDA


def decay_factor(lambda_: float, days: float, salience: float) -> float:
    """Decay seed, "Decay Formula": f = exp(-λ × dt / (salience + 0.1))."""
    return math.exp(max(MIN_EXPONENT, -lambda_ * max(0.0, days) / (salience + 0.1)))


def decayed_salience(salience: float, factor: float) -> float:
    """Decay seed, "New Salience After Decay": clamp(salience × f)."""
    value = salience * factor
    return 0.0 if value < SALIENCE_FLOOR else clamp01(value)


def reinforced_salience(salience: float, boost: float) -> float:
    """Decay seed, "Automatic Reinforcement on Query": min(1.0, salience + boost) (0.5 on a query hit)."""
    return min(1.0, salience + boost)


# --- vectors -------------------------------------------------------------------------------------------------


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


# --- summaries -----------------------------------------------------------------------------------------------

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
