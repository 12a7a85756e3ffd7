"""Settings of the memory lifecycle: waypoints, reinforcement, tiers, compression and the decay cycle.

Defaults live in the dataclasses the lifecycle code takes (shared.lifecycle.formulas, .compression, .schedule),
once; OpenMemory's OM_* names work for its settings.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from shared.config.parsing import env
from shared.lifecycle.compression import CompressionRules
from shared.lifecycle.formulas import ReinforcementRules, TierRules, WaypointRules
from shared.lifecycle.schedule import DecaySchedule
from shared.memory.updates import UpdateRules

_WAYPOINTS = WaypointRules()
_REINFORCE = ReinforcementRules()
_TIERS = TierRules()
_COMPRESSION = CompressionRules()
_DECAY = DecaySchedule()
_UPDATES = UpdateRules()


class LifecycleSettings(BaseModel):
    # Waypoints (`waypoints`; architecture seed)
    waypoint_threshold: float = Field(default=_WAYPOINTS.link_threshold, ge=0.0, le=1.0)
    waypoint_reinforce_step: float = _WAYPOINTS.reinforce_step
    waypoint_max_weight: float = _WAYPOINTS.max_weight
    waypoint_prune_threshold: float = _WAYPOINTS.prune_below
    waypoint_prune_interval_days: float = _WAYPOINTS.prune_interval_days

    # One memory per fact: a text saying what a memory of the tenant says in other case, punctuation or order of
    # parts is that memory (shared.text.fact_key); off, only the same text (after NFKC and spaces) is
    dedup_facts: bool = Field(default=True, validation_alias=env("MNEMOFLOW_DEDUP_FACTS"))

    # Updates found at write time (`updates`): a new memory that says a fact changed supersedes the one it updates
    update_detection: bool = Field(
        default=_UPDATES.on, validation_alias=env("MNEMOFLOW_UPDATE_DETECTION", "MNEMOFLOW_UPDATES")
    )
    update_min_similarity: float = Field(default=_UPDATES.min_similarity, ge=0.0, le=1.0)
    update_margin: float = Field(default=_UPDATES.margin, ge=0.0, le=1.0)
    update_restatement_similarity: float = Field(default=_UPDATES.restatement_similarity, ge=0.0, le=1.0)
    update_candidates: int = Field(default=_UPDATES.candidates, ge=2, le=64)

    # Salience and reinforcement (`reinforcement`)
    initial_salience_base: float = _REINFORCE.initial_base
    initial_salience_per_extra_sector: float = _REINFORCE.initial_per_extra_sector
    manual_reinforce_boost: float = Field(default=_REINFORCE.manual_boost, ge=0.0, le=1.0)
    query_reinforce_boost: float = Field(default=_REINFORCE.query_boost, ge=0.0, le=1.0)
    decay_reinforce_on_query: bool = Field(
        default=_REINFORCE.on_query,
        validation_alias=env("MNEMOFLOW_DECAY_REINFORCE_ON_QUERY", "OM_DECAY_REINFORCE_ON_QUERY"),
    )
    regeneration_enabled: bool = Field(
        default=_REINFORCE.regenerate,
        validation_alias=env("MNEMOFLOW_REGENERATION_ENABLED", "OM_REGENERATION_ENABLED"),
    )

    # The decay seed's tiers (`tiers`)
    tier_hot_lambda: float = _TIERS.hot_lambda
    tier_warm_lambda: float = _TIERS.warm_lambda
    tier_cold_lambda: float = _TIERS.cold_lambda
    tier_recent_days: float = _TIERS.recent_days
    tier_hot_coactivations: int = _TIERS.hot_coactivations
    tier_hot_salience: float = _TIERS.hot_salience
    tier_warm_salience: float = _TIERS.warm_salience

    # Compression and fingerprints (`compression`)
    compression_threshold: float = _COMPRESSION.compress_below
    decay_cold_threshold: float = Field(
        default=_COMPRESSION.cold_threshold,
        ge=0.0,
        le=1.0,
        validation_alias=env("MNEMOFLOW_DECAY_COLD_THRESHOLD", "OM_DECAY_COLD_THRESHOLD"),
    )
    max_vector_dim: int = Field(
        default=_COMPRESSION.max_dim, ge=64, validation_alias=env("MNEMOFLOW_MAX_VECTOR_DIM", "OM_MAX_VECTOR_DIM")
    )
    min_vector_dim: int = Field(
        default=_COMPRESSION.min_dim, ge=8, validation_alias=env("MNEMOFLOW_MIN_VECTOR_DIM", "OM_MIN_VECTOR_DIM")
    )
    fingerprint_dim: int = _COMPRESSION.fingerprint_dim
    summary_layers: int = Field(
        default=_COMPRESSION.summary_layers,
        ge=1,
        le=3,
        validation_alias=env("MNEMOFLOW_SUMMARY_LAYERS", "OM_SUMMARY_LAYERS"),
    )

    # The decay cycle (`decay`)
    decay_interval_minutes: float = Field(
        default=_DECAY.interval_minutes,
        gt=0,
        validation_alias=env("MNEMOFLOW_DECAY_INTERVAL_MINUTES", "OM_DECAY_INTERVAL_MINUTES"),
    )
    decay_ratio: float = Field(
        default=_DECAY.ratio, gt=0.0, le=1.0, validation_alias=env("MNEMOFLOW_DECAY_RATIO", "OM_DECAY_RATIO")
    )
    decay_threads: int = Field(
        default=_DECAY.threads, ge=1, validation_alias=env("MNEMOFLOW_DECAY_THREADS", "OM_DECAY_THREADS")
    )
    decay_sleep_ms: int = Field(
        default=_DECAY.sleep_ms, ge=0, validation_alias=env("MNEMOFLOW_DECAY_SLEEP_MS", "OM_DECAY_SLEEP_MS")
    )
    decay_cooldown_seconds: float = _DECAY.cooldown_seconds
    decay_defer_seconds: float = Field(default=_DECAY.defer_seconds, ge=0)
    decay_max_deferrals: int = Field(default=_DECAY.max_deferrals, ge=0)
    decay_sector_scaling: bool = _DECAY.sector_scaling
    active_query_ttl_seconds: float = _DECAY.active_query_ttl_seconds

    @property
    def waypoints(self) -> WaypointRules:
        return WaypointRules(
            link_threshold=self.waypoint_threshold,
            reinforce_step=self.waypoint_reinforce_step,
            max_weight=self.waypoint_max_weight,
            prune_below=self.waypoint_prune_threshold,
            prune_interval_days=self.waypoint_prune_interval_days,
        )

    @property
    def updates(self) -> UpdateRules:
        return UpdateRules(
            on=self.update_detection,
            min_similarity=self.update_min_similarity,
            margin=self.update_margin,
            restatement_similarity=self.update_restatement_similarity,
            candidates=self.update_candidates,
        )

    @property
    def reinforcement(self) -> ReinforcementRules:
        return ReinforcementRules(
            initial_base=self.initial_salience_base,
            initial_per_extra_sector=self.initial_salience_per_extra_sector,
            query_boost=self.query_reinforce_boost,
            manual_boost=self.manual_reinforce_boost,
            on_query=self.decay_reinforce_on_query,
            regenerate=self.regeneration_enabled,
        )

    @property
    def tiers(self) -> TierRules:
        return TierRules(
            recent_days=self.tier_recent_days,
            hot_coactivations=self.tier_hot_coactivations,
            hot_salience=self.tier_hot_salience,
            warm_salience=self.tier_warm_salience,
            hot_lambda=self.tier_hot_lambda,
            warm_lambda=self.tier_warm_lambda,
            cold_lambda=self.tier_cold_lambda,
        )

    @property
    def compression(self) -> CompressionRules:
        return CompressionRules(
            compress_below=self.compression_threshold,
            cold_threshold=self.decay_cold_threshold,
            min_dim=self.min_vector_dim,
            max_dim=self.max_vector_dim,
            fingerprint_dim=self.fingerprint_dim,
            summary_layers=self.summary_layers,
        )

    @property
    def decay(self) -> DecaySchedule:
        return DecaySchedule(
            interval_minutes=self.decay_interval_minutes,
            ratio=self.decay_ratio,
            threads=self.decay_threads,
            sleep_ms=self.decay_sleep_ms,
            cooldown_seconds=self.decay_cooldown_seconds,
            defer_seconds=self.decay_defer_seconds,
            max_deferrals=self.decay_max_deferrals,
            sector_scaling=self.decay_sector_scaling,
            active_query_ttl_seconds=self.active_query_ttl_seconds,
        )
