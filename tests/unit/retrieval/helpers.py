"""What the read path's unit tests share: four memory ids, a fixed clock, and scoring with neutral knobs."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from shared.retrieval.fusion import Candidate
from shared.retrieval.scoring import MemoryState, ScoreWeights, ScoringParams, score_candidate

A, B, C, D = (uuid.UUID(int=i) for i in range(1, 5))
NOW = datetime(2026, 11, 22, tzinfo=UTC)


def score(candidate: Candidate, *, cosine=0.8, max_lexical=2.0, salience=0.5, seen_days_ago=0.0, alpha=0.5, **extra):
    """score_candidate with every knob off but the seed's weights and the one a test turns (`extra`: ScoringParams'
    fields, and `status` / `confidence` / `recall_lift` / `coactivations` / `used_days_ago` of the memory)."""
    state = {k: extra.pop(k) for k in ("status", "confidence", "recall_lift", "coactivations") if k in extra}
    used = extra.pop("used_days_ago", None)
    if used is not None:
        state["last_used_at"] = NOW - timedelta(days=used)
    params = ScoringParams(
        weights=ScoreWeights(),
        fusion_alpha=alpha,
        hop_decay=0.5,
        recency_decay_per_day=0.05,
        lexical_power=extra.pop("lexical_power", 1.0),
        activation_weight=extra.pop("activation_weight", 1.0),
        context_weight=extra.pop("context_weight", 0.0),
        period_weight=extra.pop("period_weight", 0.0),
        confidence_weight=extra.pop("confidence_weight", 0.0),
        aging=extra.pop("aging", None),
        **extra,
    )
    memory = MemoryState(salience=salience, last_seen_at=NOW - timedelta(days=seen_days_ago), **state)
    return score_candidate(candidate, memory, cosine=cosine, max_lexical=max_lexical, now=NOW, params=params)
