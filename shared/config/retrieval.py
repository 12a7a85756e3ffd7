"""Settings of the read path: its stages (`retrieval`), full text (`lexical`) and the composite score (`scoring`).

Defaults live in the dataclasses the read path takes (shared.retrieval.params, .lexical, .scoring), once.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from shared.config.parsing import env
from shared.retrieval.evidence import GateParams
from shared.retrieval.lexical import LexicalParams
from shared.retrieval.params import RetrievalParams
from shared.retrieval.scoring import ScoreWeights, ScoringParams

_READ = RetrievalParams()
_GATE = GateParams()
_LEXICAL = LexicalParams()
_SCORING = ScoringParams()
_WEIGHTS = ScoreWeights()


class RetrievalSettings(BaseModel):
    # Stages (`retrieval`)
    default_k: int = Field(default=_READ.default_k, ge=1, le=200)
    max_k: int = Field(default=_READ.max_k, ge=1, le=1000)
    min_score: float = Field(
        default=_READ.min_score, ge=0.0, le=1.0, validation_alias=env("MNEMOFLOW_MIN_SCORE", "OM_MIN_SCORE")
    )
    min_evidence: float = Field(default=_GATE.min_evidence, ge=0.0, le=1.0)
    gate_cosine_floor: float = Field(default=_GATE.cosine_floor, ge=0.0, le=0.9)
    gate_unknown_name_weight: float = Field(default=_GATE.unknown_name_weight, ge=0.0, le=1.0)
    candidate_multiplier: int = Field(default=_READ.candidate_multiplier, ge=1, le=50)
    query_parallel_threads: int = Field(default=_READ.parallel_threads, ge=0, le=256)
    dense_min_similarity: float = Field(default=_READ.dense_min_similarity, ge=-1.0, le=1.0)
    rrf_k: int = Field(default=_READ.rrf_k, ge=1)
    activation_max_hops: int = Field(default=_READ.max_hops, ge=1, le=2)
    activation_fanout: int = Field(default=_READ.hop_fanout, ge=0, le=1000)
    period_scan_limit: int = Field(default=_READ.period_scan_limit, ge=0, le=100_000)
    # A query's bookkeeping (active-query count, outcome stats, reinforcement task, embed log lines) is done
    # after its response by one thread per gateway, gathering what came in over this many milliseconds.
    query_aftermath_interval_ms: int = Field(default=100, ge=1, le=10_000)

    # Full text (`lexical`)
    text_search_config: str = _LEXICAL.config
    bm25_k1: float = Field(default=_LEXICAL.k1, ge=0.0)
    bm25_b: float = Field(default=_LEXICAL.b, ge=0.0, le=1.0)
    bm25_term_frequency: bool = _LEXICAL.term_frequency
    lexical_common_ratio: float = Field(default=_LEXICAL.common_ratio, gt=0.0, le=1.0)
    lexical_common_min_df: int = Field(default=_LEXICAL.common_min_df, ge=0)
    lexical_select_budget: int = Field(default=_LEXICAL.select_budget, ge=0)
    lexical_rescore_window: int = Field(default=_LEXICAL.rescore_window, ge=0)

    # The composite score (`scoring`)
    weight_similarity: float = _WEIGHTS.similarity
    weight_salience: float = _WEIGHTS.salience
    weight_recency: float = _WEIGHTS.recency
    weight_waypoint: float = _WEIGHTS.waypoint
    weight_confidence: float = Field(default=_SCORING.confidence_weight, ge=0.0, le=1.0)
    conflict_penalty: float = Field(default=_SCORING.conflict_penalty, ge=0.0, le=1.0)
    recency_weight: float | None = Field(default=_SCORING.recency_weight, ge=0.0, le=1.0)
    fusion_alpha: float = Field(default=_SCORING.fusion_alpha, ge=0.0, le=1.0)
    lexical_power: float = Field(default=_SCORING.lexical_power, ge=0.5, le=4.0)
    recency_decay_per_day: float = Field(default=_SCORING.recency_decay_per_day, ge=0.0)
    waypoint_hop_decay: float = Field(default=_SCORING.hop_decay, ge=0.0, le=1.0)
    activation_weight: float = Field(default=_SCORING.activation_weight, ge=0.0, le=1.0)
    context_weight: float = Field(default=_SCORING.context_weight, ge=0.0, le=2.0)
    period_weight: float = Field(default=_SCORING.period_weight, ge=0.0, le=2.0)
    recall_share: float = Field(default=_SCORING.recall_share, ge=0.0, le=1.0)

    @property
    def retrieval(self) -> RetrievalParams:
        return RetrievalParams(
            default_k=self.default_k,
            max_k=self.max_k,
            min_score=self.min_score,
            gate=GateParams(
                min_evidence=self.min_evidence,
                cosine_floor=self.gate_cosine_floor,
                unknown_name_weight=self.gate_unknown_name_weight,
            ),
            candidate_multiplier=self.candidate_multiplier,
            dense_min_similarity=self.dense_min_similarity,
            rrf_k=self.rrf_k,
            max_hops=self.activation_max_hops,
            hop_fanout=self.activation_fanout,
            period_scan_limit=self.period_scan_limit,
            parallel_threads=self.query_parallel_threads,
        )

    @property
    def lexical(self) -> LexicalParams:
        return LexicalParams(
            config=self.text_search_config,
            k1=self.bm25_k1,
            b=self.bm25_b,
            common_ratio=self.lexical_common_ratio,
            common_min_df=self.lexical_common_min_df,
            term_frequency=self.bm25_term_frequency,
            select_budget=self.lexical_select_budget,
            rescore_window=self.lexical_rescore_window,
        )

    @property
    def scoring(self) -> ScoringParams:
        return ScoringParams(
            weights=ScoreWeights(
                self.weight_similarity, self.weight_salience, self.weight_recency, self.weight_waypoint
            ),
            fusion_alpha=self.fusion_alpha,
            lexical_power=self.lexical_power,
            hop_decay=self.waypoint_hop_decay,
            activation_weight=self.activation_weight,
            context_weight=self.context_weight,
            period_weight=self.period_weight,
            recency_decay_per_day=self.recency_decay_per_day,
            confidence_weight=self.weight_confidence,
            conflict_penalty=self.conflict_penalty,
            recency_weight=self.recency_weight,
            recall_share=self.recall_share,
        )
