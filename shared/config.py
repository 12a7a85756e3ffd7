"""One typed settings object for gateway, workers, CLI and tests, read from the environment."""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from shared.decay import TierRules
from shared.sectors import SECTORS

_TIERS = TierRules()

PROVIDERS = ("synthetic", "local", "static", "openai", "ollama")
PLACEHOLDER_SECRETS = frozenset({"changeme", "change-me", "secret", "password", "test", "xxx"})


def _env(*names: str) -> AliasChoices:
    """Accept Mnemoflow's own name first, then OpenMemory's, so an OpenMemory config carries over."""
    return AliasChoices(*names)


def normalize_database_url(url: str) -> str:
    """Point any PostgreSQL DSN at the psycopg 3 driver."""
    for prefix in ("postgres://", "postgresql://", "postgresql+psycopg2://", "postgresql+asyncpg://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _pairs(value: object, setting: str, shape: str) -> object:
    """'a=b,c=d' from the environment as {'a': 'b', 'c': 'd'}; anything else unchanged."""
    if not isinstance(value, str):
        return value
    pairs: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in value.split(","))):
        left, sep, right = (p.strip() for p in entry.partition("="))
        if not sep or not left or not right:
            raise ValueError(f"{setting} entry {entry!r} must look like {shape!r}")
        pairs[left] = right
    return pairs


class Settings(BaseSettings):
    """Every knob of Mnemoflow; defaults are the seeds' defaults."""

    model_config = SettingsConfigDict(env_prefix="MNEMOFLOW_", extra="ignore", populate_by_name=True)

    environment: Literal["development", "test", "production"] = "development"
    log_level: str = "INFO"

    # Where the embedded stack keeps its data; an external server is used when a URL is set.
    data_dir: Path = Field(default=Path(".mnemoflow"), validation_alias=_env("MNEMOFLOW_DATA_DIR"))
    database_url: str | None = Field(default=None, validation_alias=_env("DATABASE_URL", "MNEMOFLOW_DATABASE_URL"))
    redis_url: str | None = Field(default=None, validation_alias=_env("REDIS_URL", "MNEMOFLOW_REDIS_URL"))

    host: str = Field(default="127.0.0.1", validation_alias=_env("HOST", "MNEMOFLOW_HOST"))
    port: int = Field(default=8080, ge=1, le=65535, validation_alias=_env("PORT", "MNEMOFLOW_PORT", "OM_PORT"))
    flower_port: int = Field(
        default=5555, ge=1, le=65535, validation_alias=_env("FLOWER_PORT", "MNEMOFLOW_FLOWER_PORT")
    )

    # Auth: "key=tenant,key2=tenant2"; OpenMemory's single OM_API_KEY binds to default_user_id.
    api_keys: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, validation_alias=_env("MNEMOFLOW_API_KEYS")
    )
    om_api_key: str | None = Field(default=None, validation_alias=_env("OM_API_KEY"))
    # Operator key for store-wide actions (/maintenance/*); without any keys configured everyone is an operator.
    admin_api_key: SecretStr | None = Field(default=None, validation_alias=_env("MNEMOFLOW_ADMIN_API_KEY"))
    default_user_id: str = "anonymous"

    # Embeddings
    embedding_provider: Literal["synthetic", "local", "static", "openai", "ollama"] = Field(
        default="local", validation_alias=_env("MNEMOFLOW_EMBEDDING_PROVIDER", "OM_EMBEDDINGS")
    )
    # Architecture seed: simple = one model for every sector; advanced = a model per sector where
    # MNEMOFLOW_SECTOR_PROVIDERS says so ("procedural=local,episodic=static"), the default elsewhere.
    embed_mode: Literal["simple", "advanced"] = Field(
        default="simple", validation_alias=_env("MNEMOFLOW_EMBED_MODE", "OM_EMBED_MODE")
    )
    sector_providers: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, validation_alias=_env("MNEMOFLOW_SECTOR_PROVIDERS")
    )
    # local provider (MiniLM ONNX): tokens per window (model limit 512; trained on 256), window overlap
    local_window_tokens: int = Field(default=256, ge=8, le=512)
    local_overlap_tokens: int = Field(default=50, ge=0)
    local_batch_size: int = Field(default=32, ge=1)
    local_threads: int = Field(default=1, ge=1)
    # A memory that follows others in a sequence (a batch with `sequence: true`, an add with `follows`) is
    # embedded after this many of the turns before it, by providers that can (local, synthetic); 0: alone.
    # The context is cut to its last `embed_context_chars` characters (the model's window holds fewer).
    embed_context_turns: int = Field(default=2, ge=0, le=16)
    embed_context_chars: int = Field(default=2000, ge=0, le=100_000)
    # static provider (model2vec-style, distilled from MiniLM by `make static-model`): a model directory
    static_model_path: Path | None = None
    # HTTP providers (OpenAI-compatible /v1/embeddings, Ollama's /api/embed); keys never logged
    openai_base_url: str = Field(default="https://api.openai.com", validation_alias=_env("OPENAI_BASE_URL"))
    openai_api_key: SecretStr | None = Field(default=None, validation_alias=_env("OPENAI_API_KEY"))
    openai_model: str = Field(default="text-embedding-3-small", validation_alias=_env("MNEMOFLOW_OPENAI_MODEL"))
    ollama_url: str = Field(default="http://localhost:11434", validation_alias=_env("OLLAMA_URL"))
    ollama_model: str = Field(default="nomic-embed-text", validation_alias=_env("MNEMOFLOW_OLLAMA_MODEL"))
    http_embed_batch_size: int = Field(default=128, ge=1)
    http_embed_timeout_seconds: float = Field(default=30.0, gt=0)
    http_embed_max_attempts: int = Field(default=5, ge=1)
    # Texts longer than a window (estimated tokens) are split with overlap and mean-pooled (architecture seed)
    http_window_tokens: int = Field(default=512, ge=16)
    http_overlap_tokens: int = Field(default=50, ge=0)
    embed_log_retention_days: float = Field(default=30.0, gt=0)
    reembed_chunk_size: int = Field(default=500, ge=1, le=10_000)
    query_embedding_cache_ttl_seconds: int = Field(default=86_400, ge=0, description="0 turns the cache off")
    hot_row_cache_ttl_seconds: int = Field(
        default=3600, ge=0, description="hot-tier memory payloads kept in Redis for queries; 0 turns it off"
    )
    # The model's own dimension when unset; required for HTTP providers (their servers decide it).
    vector_dim: int | None = Field(
        default=None, ge=8, le=4000, validation_alias=_env("MNEMOFLOW_VECTOR_DIM", "OM_VEC_DIM")
    )
    hnsw_m: int = Field(default=16, ge=4, le=100)
    hnsw_ef_construction: int = Field(default=64, ge=8, le=1000)
    hnsw_ef_search: int = Field(default=64, ge=1, le=1000)

    # Input limits
    max_content_chars: int = Field(default=100_000, ge=1)
    max_tags: int = Field(default=64, ge=0)
    max_tag_chars: int = Field(default=128, ge=1)
    max_metadata_bytes: int = Field(default=64 * 1024, ge=0)
    max_batch_items: int = Field(default=50_000, ge=1)
    # Items per chunk task; unset: ~1 s of embedding per chunk (100 for the local model, 500 for the fast
    # providers), so the last chunks of a burst leave no worker idle for long and a retry redoes little.
    batch_chunk_size: int | None = Field(default=None, ge=1, le=10_000)
    merge_batch_size: int = Field(default=1000, ge=1, le=100_000)
    merge_time_budget_seconds: float = Field(default=30.0, gt=0)
    # The merge into HNSW yields to ingestion (embed queues not empty) until this many vectors wait in the
    # fresh tier; queries scan fresh vectors exactly, so the cap bounds what that costs them. 0: never yield.
    merge_yield_max_fresh: int = Field(default=50_000, ge=0)
    max_request_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)

    # Retrieval (architecture seed: composite 0.6/0.2/0.1/0.1; recall seed: RRF k=60)
    default_k: int = Field(default=8, ge=1, le=200)
    max_k: int = Field(default=200, ge=1, le=1000)
    min_score: float = Field(default=0.3, ge=0.0, le=1.0, validation_alias=_env("MNEMOFLOW_MIN_SCORE", "OM_MIN_SCORE"))
    candidate_multiplier: int = Field(default=4, ge=1, le=50)
    # The full-text stage runs on a second connection beside embedding and the dense search (the gateway's
    # queries); its threads, per process. 0 runs the stages one after the other on one connection.
    query_parallel_threads: int = Field(default=16, ge=0, le=256)
    # A query's bookkeeping (active-query count, outcome stats, reinforcement task, embed log lines) is done
    # after its response by one thread per gateway, gathering what came in over this many milliseconds.
    query_aftermath_interval_ms: int = Field(default=100, ge=1, le=10_000)
    # kNN always returns neighbours; below this cosine a "neighbour" is noise, not a dense hit.
    dense_min_similarity: float = Field(default=0.05, ge=-1.0, le=1.0)
    rrf_k: int = Field(default=60, ge=1)
    weight_similarity: float = 0.6
    weight_salience: float = 0.2
    weight_recency: float = 0.1
    weight_waypoint: float = 0.1
    # OpenMem: confidence weighs 0.1 (a memory keeps 1 - 0.1 * (1 - confidence) of its score); the weaker of
    # two memories joined by a `contradicts` edge is multiplied by 0.3.
    weight_confidence: float = Field(default=0.1, ge=0.0, le=1.0)
    conflict_penalty: float = Field(default=0.3, ge=0.0, le=1.0)
    # Recall's recency_weight interpolation instead of the fixed weights above, when set (a request may override).
    recency_weight: float | None = Field(default=None, ge=0.0, le=1.0)
    # membox fusion: relevance = decay^hops * (alpha*cosine + (1-alpha)*lexical); 0.7 is best on the tuning
    # parts of both evaluation sets once sequence turns are embedded in context (0.5 was, before)
    fusion_alpha: float = Field(default=0.7, ge=0.0, le=1.0)
    # The lexical strength (BM25 / the best BM25 of the query) is raised to this power: a memory sharing one
    # or two of the query's words (a name, a common term) keeps less than its share of the best match's
    # credit (1 = linear). 2 is best on both tuning parts (LoCoMo and SciFact; 1.25-2.5 is a plateau).
    lexical_power: float = Field(default=2.0, ge=0.5, le=4.0)
    recency_decay_per_day: float = Field(default=0.05, ge=0.0)
    waypoint_hop_decay: float = Field(default=0.5, ge=0.0, le=1.0)
    # Spreading activation over waypoints (OpenMem: both directions, max_hops 2, decay 0.5 per hop, max wins)
    activation_max_hops: int = Field(default=2, ge=1, le=2)
    # How much of the activation spread to a memory counts in its similarity (1 = all). Context support
    # (below) already adds what surrounds a memory; at full weight the two count a neighbour's match twice
    # (LoCoMo's tuning part: 0.4-0.75 a plateau, 1.0 lower; SciFact unchanged).
    activation_weight: float = Field(default=0.5, ge=0.0, le=1.0)
    # Context support: the best relevance among the memories within activation_max_hops in reading order
    # (`next` links), times this, is added to a memory's similarity (0 = off); see retrieval.context_support
    context_weight: float = Field(default=0.4, ge=0.0, le=2.0)
    # Time anchoring: added to the similarity of a memory that occurred (occurred_at, else created_at) in the
    # month or year the query names (0 = off); see shared.temporal
    period_weight: float = Field(default=0.5, ge=0.0, le=2.0)
    # ... and the memories of that period are searched on their own too (the latest this many of it, compared
    # exactly with the query), so one the words and the vector search missed can still be ranked (0 = off)
    period_scan_limit: int = Field(default=1_000, ge=0, le=100_000)
    text_search_config: str = "english"
    # BM25 over the tsvector with per-tenant document frequencies (k1, b: Anserini/Pyserini's defaults, the
    # BM25 of the SciFact reference points; Lucene's own are 1.2 / 0.75)
    bm25_k1: float = Field(default=0.9, ge=0.0)
    bm25_b: float = Field(default=0.4, ge=0.0, le=1.0)
    # Count a term's frequency in a memory (BM25 proper); off: a matched term counts once (cheaper)
    bm25_term_frequency: bool = True
    # A term in more than this share of a tenant's memories (and more than common_min_df of them) only
    # scores candidates, it does not select them (Elasticsearch's common-terms cutoff).
    lexical_common_ratio: float = Field(default=0.05, gt=0.0, le=1.0)
    lexical_common_min_df: int = Field(default=500, ge=0)
    # Of the rare terms, the rarest select candidates while their document frequencies add up to at most
    # this (the rest only score): bounds the rows a query scores in a large store; 0 = no limit.
    lexical_select_budget: int = Field(default=20_000, ge=0)
    # When more memories than this may match, they are ranked first by BM25 counting each term once (cheap),
    # and only this many best are scored with term frequency; 0 = score every match with it. When every
    # query term is common, the memories with all of them are candidates only up to this many.
    lexical_rescore_window: int = Field(default=1_000, ge=0)

    # Waypoints (architecture seed)
    waypoint_threshold: float = Field(default=0.75, ge=0.0, le=1.0)
    waypoint_reinforce_step: float = 0.05
    waypoint_max_weight: float = 1.0
    waypoint_prune_threshold: float = 0.05
    waypoint_prune_interval_days: float = 7.0

    # Salience (OpenMemory: 0.4 + 0.1 per additional sector) and reinforcement (decay seed)
    initial_salience_base: float = 0.4
    initial_salience_per_extra_sector: float = 0.1
    manual_reinforce_boost: float = Field(default=0.2, ge=0.0, le=1.0)
    query_reinforce_boost: float = Field(default=0.5, ge=0.0, le=1.0)

    # Lifecycle (decay seed; OpenMemory's OM_* names work). The cycle is shared/lifecycle.py.
    decay_threads: int = Field(default=3, ge=1, validation_alias=_env("MNEMOFLOW_DECAY_THREADS", "OM_DECAY_THREADS"))
    decay_cold_threshold: float = Field(
        default=0.25,
        ge=0.0,
        le=1.0,
        validation_alias=_env("MNEMOFLOW_DECAY_COLD_THRESHOLD", "OM_DECAY_COLD_THRESHOLD"),
    )
    decay_reinforce_on_query: bool = Field(
        default=True,
        validation_alias=_env("MNEMOFLOW_DECAY_REINFORCE_ON_QUERY", "OM_DECAY_REINFORCE_ON_QUERY"),
    )
    regeneration_enabled: bool = Field(
        default=True, validation_alias=_env("MNEMOFLOW_REGENERATION_ENABLED", "OM_REGENERATION_ENABLED")
    )
    max_vector_dim: int = Field(
        default=1536, ge=64, validation_alias=_env("MNEMOFLOW_MAX_VECTOR_DIM", "OM_MAX_VECTOR_DIM")
    )
    min_vector_dim: int = Field(
        default=64, ge=8, validation_alias=_env("MNEMOFLOW_MIN_VECTOR_DIM", "OM_MIN_VECTOR_DIM")
    )
    summary_layers: int = Field(
        default=3, ge=1, le=3, validation_alias=_env("MNEMOFLOW_SUMMARY_LAYERS", "OM_SUMMARY_LAYERS")
    )
    decay_ratio: float = Field(
        default=0.03, gt=0.0, le=1.0, validation_alias=_env("MNEMOFLOW_DECAY_RATIO", "OM_DECAY_RATIO")
    )
    decay_sleep_ms: int = Field(
        default=200, ge=0, validation_alias=_env("MNEMOFLOW_DECAY_SLEEP_MS", "OM_DECAY_SLEEP_MS")
    )
    decay_interval_minutes: float = Field(
        default=1440,
        gt=0,
        validation_alias=_env("MNEMOFLOW_DECAY_INTERVAL_MINUTES", "OM_DECAY_INTERVAL_MINUTES"),
    )
    decay_cooldown_seconds: float = 60.0
    # A scheduled cycle that finds queries active tries again this often, this many times, then skips the interval.
    decay_defer_seconds: float = Field(default=60.0, ge=0)
    decay_max_deferrals: int = Field(default=30, ge=0)
    # Scale the tier's λ by the memory's sector rate relative to the mean sector rate (architecture seed §2.3).
    decay_sector_scaling: bool = True
    # How long a query counts as active for the decay cycle if its gateway dies before saying it finished.
    active_query_ttl_seconds: float = 30.0
    # The decay seed's tiers (shared/decay.py holds the seed's values, once).
    tier_hot_lambda: float = _TIERS.hot_lambda
    tier_warm_lambda: float = _TIERS.warm_lambda
    tier_cold_lambda: float = _TIERS.cold_lambda
    tier_recent_days: float = _TIERS.recent_days
    tier_hot_coactivations: int = _TIERS.hot_coactivations
    tier_hot_salience: float = _TIERS.hot_salience
    tier_warm_salience: float = _TIERS.warm_salience
    compression_threshold: float = 0.7
    fingerprint_dim: int = 32

    # Per-tenant labels on /metrics (injection and blindness counters); beyond this many, tenants count as _other.
    metrics_max_tenants: int = Field(default=1000, ge=0)
    # Injection and blindness rates in GET /sectors cover this many days (counted in Redis, kept 8 days).
    retrieval_stats_days: int = Field(default=7, ge=1, le=8)

    # Ingestion (architecture seed §5: chunk_size 2048 tokens, overlap 256, preserve_metadata; 25 MB uploads)
    ingest_max_bytes: int = Field(default=25 * 1024 * 1024, ge=1024, description="largest upload or fetched body")
    ingest_chunk_size: int = Field(default=2048, ge=16, le=8192)
    ingest_chunk_overlap: int = Field(default=256, ge=0, le=4096)
    # Parser limits per document (a sandboxed child each); audio/video get their own, transcription is slow.
    ingest_parse_timeout_seconds: float = Field(default=120.0, gt=0)
    ingest_parse_memory_mb: int = Field(default=2048, ge=64)
    ingest_media_timeout_seconds: float = Field(default=1800.0, gt=0)
    ingest_media_memory_mb: int = Field(default=4096, ge=64)
    ingest_fetch_timeout_seconds: float = Field(default=60.0, gt=0)
    # URL fetching refuses private, loopback, link-local and metadata addresses unless told otherwise:
    # allow_private turns the check off (tests, a trusted single-tenant box); allowed_networks admits only
    # the listed CIDRs ("10.1.0.0/16,fd00::/8", e.g. an intranet wiki).
    ingest_allow_private_urls: bool = False
    ingest_allowed_networks: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # ?wait=true on an ingest route waits at most this long before answering 202 anyway.
    ingest_wait_max_seconds: float = Field(default=30.0, ge=0)

    # Jobs and Celery
    job_max_attempts: int = Field(default=5, ge=1)
    job_stall_seconds: int = Field(default=300, ge=5)
    sweep_interval_seconds: float = Field(default=60.0, gt=0)
    broker_visibility_timeout: int = Field(default=3600, ge=1)
    worker_concurrency: int = Field(default=2, ge=1)

    @field_validator("api_keys", mode="before")
    @classmethod
    def _parse_api_keys(cls, value: object) -> object:
        return _pairs(value, "MNEMOFLOW_API_KEYS", "key=tenant")

    @field_validator("ingest_allowed_networks", mode="before")
    @classmethod
    def _parse_networks(cls, value: object) -> object:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, list):
            for network in value:
                try:
                    ipaddress.ip_network(network)
                except ValueError as exc:
                    raise ValueError(
                        f"MNEMOFLOW_INGEST_ALLOWED_NETWORKS: {network!r} is not a network ({exc})"
                    ) from exc
        return value

    @field_validator("sector_providers", mode="before")
    @classmethod
    def _parse_sector_providers(cls, value: object) -> object:
        value = _pairs(value, "MNEMOFLOW_SECTOR_PROVIDERS", "sector=provider")
        if isinstance(value, dict):
            for sector, provider in value.items():
                if sector not in SECTORS:
                    raise ValueError(
                        f"MNEMOFLOW_SECTOR_PROVIDERS: unknown sector {sector!r}; one of {', '.join(SECTORS)}"
                    )
                if provider not in PROVIDERS:
                    raise ValueError(
                        f"MNEMOFLOW_SECTOR_PROVIDERS: unknown provider {provider!r} for {sector}; "
                        f"one of {', '.join(PROVIDERS)}"
                    )
        return value

    @field_validator("database_url")
    @classmethod
    def _normalize_dsn(cls, value: str | None) -> str | None:
        return normalize_database_url(value) if value else None

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
        if self.default_k > self.max_k:
            raise ValueError("MNEMOFLOW_DEFAULT_K must not exceed MNEMOFLOW_MAX_K")
        if self.environment != "development":
            keys = list(self.all_api_keys)
            if self.admin_api_key is not None:
                keys.append(self.admin_api_key.get_secret_value())
            weak = [k for k in keys if k.lower() in PLACEHOLDER_SECRETS or len(k) < 12]
            if weak:
                raise ValueError(
                    "refusing placeholder or short API keys outside development; "
                    "set MNEMOFLOW_API_KEYS to keys of at least 12 random characters"
                )
        return self

    @property
    def all_api_keys(self) -> dict[str, str]:
        """API key → tenant, including OpenMemory's single OM_API_KEY."""
        keys = dict(self.api_keys)
        if self.om_api_key:
            keys.setdefault(self.om_api_key, self.default_user_id)
        return keys

    def provider_for(self, sector: str) -> str:
        """The embedding provider of one sector (advanced mode may give a sector its own)."""
        if self.embed_mode == "advanced":
            return self.sector_providers.get(sector, self.embedding_provider)
        return self.embedding_provider

    @property
    def chunk_size(self) -> int:
        """Items per chunk task (MNEMOFLOW_BATCH_CHUNK_SIZE, or the provider's default)."""
        if self.batch_chunk_size is not None:
            return self.batch_chunk_size
        return {"local": 100, "openai": 256, "ollama": 256}.get(self.embedding_provider, 500)

    @property
    def resolved_static_model_path(self) -> Path:
        """The static model's directory: MNEMOFLOW_STATIC_MODEL_PATH, or where `make static-model` puts it."""
        return self.static_model_path or self.data_dir / "models" / "minilm-static-256"

    @property
    def score_weights(self) -> tuple[float, float, float, float]:
        return (self.weight_similarity, self.weight_salience, self.weight_recency, self.weight_waypoint)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once."""
    return Settings()
