"""One typed settings object for gateway, workers, CLI and tests, read from the environment once.

Its fields are declared by area (server, embedding, retrieval, lifecycle, ingest, jobs, openmemory: the modules
beside this one) under their environment names (MNEMOFLOW_*, and OpenMemory's OM_* where it has one). Each area
gives its groups as the frozen dataclasses the code takes, whose defaults are the only declaration of the defaults:

    settings.limits  settings.rate_limits  settings.database_limits
    settings.embedding  settings.context  settings.retrieval  settings.lexical  settings.scoring
    settings.waypoints  settings.reinforcement  settings.tiers  settings.compression  settings.decay  settings.ingest
    settings.lgm  settings.user_summary
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from pydantic import model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.config.embedding import EmbeddingSettings
from shared.config.ingest import IngestSettings
from shared.config.jobs import JobSettings
from shared.config.keys import key_problems
from shared.config.lifecycle import LifecycleSettings
from shared.config.openmemory import OpenMemorySettings
from shared.config.retrieval import RetrievalSettings
from shared.config.server import ServerSettings
from shared.ingest.params import IngestParams
from shared.lifecycle.formulas import Aging
from shared.retrieval.scoring import ScoringParams


class Settings(
    ServerSettings,
    EmbeddingSettings,
    RetrievalSettings,
    LifecycleSettings,
    IngestSettings,
    JobSettings,
    OpenMemorySettings,
    BaseSettings,
):
    """Every knob of Mnemoflow; defaults are the seeds' defaults."""

    # hide_input_in_errors: a refused MNEMOFLOW_API_KEYS must not print the keys it holds.
    model_config = SettingsConfigDict(
        env_prefix="MNEMOFLOW_", extra="ignore", populate_by_name=True, hide_input_in_errors=True
    )

    @property
    def scoring(self) -> ScoringParams:
        """The read path's scoring (`RetrievalSettings`), reading salience as decayed to the query's time by the
        lifecycle's own tier rules."""
        return replace(super().scoring, aging=Aging(self.tiers, self.decay.sector_scaling))

    @property
    def ingest_time_limit(self) -> int:
        """A document step's hard time limit: fetching, then the longest parser, with room to plan its chunks."""
        return int(self.ingest.fetch_timeout_seconds + self.ingest.longest_parse_seconds + 300)

    @property
    def ingest(self) -> IngestParams:
        """Ingestion (`IngestSettings`), its parser sandbox strict in production unless told otherwise."""
        strict = self.ingest_sandbox_strict
        return replace(super().ingest, sandbox_strict=self.environment == "production" if strict is None else strict)

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if self.min_vector_dim > self.max_vector_dim:
            raise ValueError("OM_MIN_VECTOR_DIM must not exceed OM_MAX_VECTOR_DIM")
        if self.min_vector_dim <= self.fingerprint_dim:
            raise ValueError(
                f"OM_MIN_VECTOR_DIM ({self.min_vector_dim}) must be above the fingerprint's {self.fingerprint_dim} "
                "dimensions: a compressed vector must never be mistaken for a fingerprint"
            )
        if self.sector_providers and self.embed_mode != "advanced":
            raise ValueError("MNEMOFLOW_SECTOR_PROVIDERS needs MNEMOFLOW_EMBED_MODE=advanced (OM_EMBED_MODE)")
        if self.ingest_chunk_overlap >= self.ingest_chunk_size:
            raise ValueError("MNEMOFLOW_INGEST_CHUNK_OVERLAP must be below MNEMOFLOW_INGEST_CHUNK_SIZE")
        if max(self.task_time_limit_seconds, self.ingest_time_limit) >= self.broker_visibility_timeout:
            raise ValueError(
                f"MNEMOFLOW_BROKER_VISIBILITY_TIMEOUT ({self.broker_visibility_timeout}s) must exceed every task's "
                f"time limit (MNEMOFLOW_TASK_TIME_LIMIT_SECONDS {self.task_time_limit_seconds}s; a document's "
                f"{self.ingest_time_limit}s, from the fetch and parser timeouts), or Redis re-delivers running tasks"
            )
        if self.default_k > self.max_k:
            raise ValueError("MNEMOFLOW_DEFAULT_K must not exceed MNEMOFLOW_MAX_K")
        operator = self.admin_api_key.get_secret_value() if self.admin_api_key is not None else None
        problems = key_problems(
            self.api_keys,
            operator,
            om_key=self.om_api_key,
            om_tenant=self.default_user_id,
            strength=self.environment != "development",
        )
        if problems:
            raise ValueError(
                "refusing these keys: "
                + "; ".join(problems)
                + ". Keys are random strings of at least 12 characters (e.g. python -c 'import secrets; "
                "print(secrets.token_urlsafe(24))'), one per tenant and one for the operator"
            )
        return self


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once."""
    return Settings()
