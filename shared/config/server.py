"""Settings of the processes themselves: environment, servers, ports, auth, request and input limits, rate limits
and database time limits."""

from __future__ import annotations

import functools
import ipaddress
import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import NoDecode

from shared.api.common import check_user_id
from shared.backpressure import (
    Bucket,
    DatabaseLimits,
    EmbeddingBound,
    RateLimits,
    Timeouts,
    default_gateway_workers,
    gateway_pool_for,
)
from shared.config.keys import weakness
from shared.config.parsing import env, normalize_database_url, pairs
from shared.config.secrets import kept_secret
from shared.memory.limits import InputLimits
from shared.restarts import RestartPolicy

_LIMITS = InputLimits()
_RESTARTS = RestartPolicy()
_RATES = RateLimits()
_DB = DatabaseLimits()
_EMBED_BOUND = EmbeddingBound()
SECRETS_DIR = "secrets"  # under the data dir: what a development stack makes for itself
SECRET_FILES = {"signing_key": "signing-key", "metrics_tenant_salt": "metrics-tenant-salt"}
SECRET_VARIABLES = {"signing_key": "MNEMOFLOW_SIGNING_KEY", "metrics_tenant_salt": "MNEMOFLOW_METRICS_TENANT_SALT"}
# Read once per process: the file never changes once made, and a query labels its tenant with the salt.
_kept_secret = functools.lru_cache(maxsize=8)(kept_secret)


class OpenAccessRefused(RuntimeError):
    """A server process asked to start outside development without the keys that close it."""


class ServerSettings(BaseModel):
    environment: Literal["development", "test", "production"] = "development"
    log_level: str = "INFO"

    # Where the embedded stack keeps its data; an external server is used when a URL is set.
    data_dir: Path = Field(default=Path(".mnemoflow"), validation_alias=env("MNEMOFLOW_DATA_DIR"))
    database_url: str | None = Field(default=None, validation_alias=env("DATABASE_URL", "MNEMOFLOW_DATABASE_URL"))
    redis_url: str | None = Field(default=None, validation_alias=env("REDIS_URL", "MNEMOFLOW_REDIS_URL"))

    host: str = Field(default="127.0.0.1", validation_alias=env("HOST", "MNEMOFLOW_HOST"))
    port: int = Field(default=8080, ge=1, le=65535, validation_alias=env("PORT", "MNEMOFLOW_PORT", "OM_PORT"))
    flower_port: int = Field(default=5555, ge=1, le=65535, validation_alias=env("FLOWER_PORT", "MNEMOFLOW_FLOWER_PORT"))

    # Auth: "key=tenant,key2=tenant2"; OpenMemory's single OM_API_KEY binds to default_user_id.
    api_keys: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, validation_alias=env("MNEMOFLOW_API_KEYS")
    )
    om_api_key: str | None = Field(default=None, validation_alias=env("OM_API_KEY"))
    # Operator key for store-wide actions (/maintenance/*); without any keys configured everyone is an operator.
    admin_api_key: SecretStr | None = Field(default=None, validation_alias=env("MNEMOFLOW_ADMIN_API_KEY"))
    default_user_id: str = "anonymous"

    # Per-tenant labels on /metrics (injection and blindness counters); beyond this many, tenants count as _other.
    metrics_max_tenants: int = Field(default=1000, ge=0)
    # Tenants appear on /metrics as a keyed hash of their user_id (services/gateway/metrics.py), never by name.
    # Required outside development; in development, made once and kept in the data dir (`tenant_salt`).
    metrics_tenant_salt: SecretStr | None = None
    # Signs every task message (shared/security/signing.py) and keys the cache seals; the broker never holds it.
    # Required outside development; in development, made once and kept in the data dir (`signing_secret`).
    signing_key: SecretStr | None = Field(default=None, validation_alias=env("MNEMOFLOW_SIGNING_KEY"))
    # Injection and blindness rates in GET /sectors cover this many days (counted in Redis, kept 8 days).
    retrieval_stats_days: int = Field(default=7, ge=1, le=8)

    # Input limits (`limits`)
    max_request_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    max_content_chars: int = Field(default=_LIMITS.max_content_chars, ge=1)
    max_content_tokens: int = Field(default=_LIMITS.max_content_tokens, ge=1)
    max_query_tokens: int = Field(default=_LIMITS.max_query_tokens, ge=1)
    max_tags: int = Field(default=_LIMITS.max_tags, ge=0)
    max_tag_chars: int = Field(default=_LIMITS.max_tag_chars, ge=1)
    max_metadata_bytes: int = Field(default=_LIMITS.max_metadata_bytes, ge=0)
    max_batch_items: int = Field(default=_LIMITS.max_batch_items, ge=1)

    # How `mnemoflow up` restarts a crashed child (`restarts`)
    restart_delay_seconds: float = Field(default=_RESTARTS.first_delay, gt=0)
    restart_max_delay_seconds: float = Field(default=_RESTARTS.max_delay, gt=0)
    restart_reset_seconds: float = Field(default=_RESTARTS.reset_after, gt=0)
    crash_loop_crashes: int = Field(default=_RESTARTS.crash_loop_crashes, ge=1)
    crash_loop_seconds: float = Field(default=_RESTARTS.crash_loop_window, gt=0)

    # Per-tenant rate limits (`rate_limits`): token buckets in Redis, shared by every gateway process.
    rate_limits_enabled: bool = _RATES.enabled
    rate_limit_query_burst: int = Field(default=_RATES.queries.burst, ge=1)
    rate_limit_queries_per_second: float = Field(default=_RATES.queries.per_second, gt=0)
    rate_limit_write_burst: int = Field(default=_RATES.writes.burst, ge=1)
    rate_limit_writes_per_second: float = Field(default=_RATES.writes.per_second, gt=0)
    rate_limit_ingest_burst: int = Field(default=_RATES.ingest.burst, ge=1)
    rate_limit_ingests_per_second: float = Field(default=_RATES.ingest.per_second, gt=0)

    # Database time limits and the gateway's pool (`database_limits`); 0 ms: no limit.
    gateway_statement_timeout_ms: int = Field(default=_DB.gateway.statement_ms, ge=0)
    gateway_lock_timeout_ms: int = Field(default=_DB.gateway.lock_ms, ge=0)
    worker_statement_timeout_ms: int = Field(default=_DB.worker.statement_ms, ge=0)
    worker_lock_timeout_ms: int = Field(default=_DB.worker.lock_ms, ge=0)
    maintenance_statement_timeout_ms: int = Field(default=_DB.maintenance.statement_ms, ge=0)
    maintenance_lock_timeout_ms: int = Field(default=_DB.maintenance.lock_ms, ge=0)
    # Per gateway process; unset: 15 with one process, its share with several (docs/scaling.md#connections).
    gateway_pool_size: int | None = Field(default=None, ge=1, le=500)
    # Gateway processes (uvicorn workers, services/gateway/serve.py); unset: one per two usable cores, 1 to 4.
    gateway_workers: int | None = Field(default=None, ge=1, le=64)
    # Where the gateway's processes keep their Prometheus files (emptied at each start); unset: a temporary directory.
    gateway_metrics_dir: Path | None = None
    gateway_pool_timeout_seconds: float = Field(default=_DB.gateway_pool_timeout_seconds, gt=0)
    # What /health reports is read in the background this often (services/gateway/health.py).
    health_interval_seconds: float = Field(default=2.0, gt=0, le=60)
    # The gateway's own embeddings (`embedding_bound`): at once per process (unset: its share of the cores), waiting.
    gateway_embed_concurrency: int | None = Field(default=_EMBED_BOUND.concurrency, ge=1, le=64)
    gateway_embed_queue: int = Field(default=_EMBED_BOUND.queue, ge=0, le=100_000)
    gateway_embed_wait_seconds: float = Field(default=_EMBED_BOUND.wait_seconds, gt=0)

    @field_validator("api_keys", mode="before")
    @classmethod
    def _parse_api_keys(cls, value: object) -> object:
        return pairs(value, "MNEMOFLOW_API_KEYS", "key=tenant", secret=True)

    @field_validator("api_keys")
    @classmethod
    def _tenants_are_user_ids(cls, value: dict[str, str]) -> dict[str, str]:
        for tenant in value.values():
            try:
                check_user_id(tenant)
            except ValueError as exc:
                raise ValueError(f"MNEMOFLOW_API_KEYS: {exc}") from None
        return value

    @field_validator("metrics_tenant_salt", "signing_key", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("metrics_tenant_salt", "signing_key")
    @classmethod
    def _secret_is_random(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        why = weakness(value.get_secret_value()) if value is not None else None
        if why:
            name = SECRET_VARIABLES[str(info.field_name)]
            raise ValueError(
                f"{name} {why}: give it at least 12 random characters (python -c 'import secrets; "
                "print(secrets.token_urlsafe(32))')"
            )
        return value

    @field_validator("default_user_id")
    @classmethod
    def _default_is_a_user_id(cls, value: str) -> str:
        try:
            return check_user_id(value)
        except ValueError as exc:
            raise ValueError(f"MNEMOFLOW_DEFAULT_USER_ID: {exc}") from None

    @field_validator("database_url")
    @classmethod
    def _normalize_dsn(cls, value: str | None) -> str | None:
        return normalize_database_url(value) if value else None

    def require_keys(self, process: str, *, listens_on: str | None = None) -> None:
        """Refuse to start `process` open: outside development API keys and the operator key are required, and in
        every environment a process without keys listens on loopback only (`listens_on`: its address, if any)."""
        keyless = not self.all_api_keys and self.admin_api_key is None
        if keyless and listens_on is not None and not is_loopback(listens_on):
            raise OpenAccessRefused(
                f"refusing to start {process} without keys on {listens_on}: every caller would act as the operator. "
                "Set MNEMOFLOW_API_KEYS and MNEMOFLOW_ADMIN_API_KEY (MNEMOFLOW_ENVIRONMENT=production), or listen "
                "on 127.0.0.1 (HOST)"
            )
        if self.environment == "development":
            return
        missing = [
            name
            for name, present in (
                ("MNEMOFLOW_API_KEYS", bool(self.all_api_keys)),
                ("MNEMOFLOW_ADMIN_API_KEY", self.admin_api_key is not None),
            )
            if not present
        ]
        if missing:
            raise OpenAccessRefused(
                f"refusing to start {process} with MNEMOFLOW_ENVIRONMENT={self.environment} and no "
                f"{' and no '.join(missing)}: outside development every caller needs a key. Set "
                "MNEMOFLOW_API_KEYS='<key>=<user_id>,...' (the tenants' keys) and MNEMOFLOW_ADMIN_API_KEY=<key> "
                "(the operator's), each at least 12 random characters; or, on a machine of your own, run keyless "
                "on loopback with MNEMOFLOW_ENVIRONMENT=development"
            )

    def signing_secret(self) -> bytes | None:
        """The key that signs task messages: MNEMOFLOW_SIGNING_KEY; in development without it, the one kept in
        the data dir (made on first use); outside development without it, None (`require_secrets` refuses)."""
        value = self._secret("signing_key")
        return value.encode("utf-8") if value is not None else None

    def tenant_salt(self) -> str:
        """The key of the tenants' hashes on /metrics, found like `signing_secret` ("" outside development
        without one: `require_secrets` refuses to start the gateway so)."""
        return self._secret("metrics_tenant_salt") or ""

    def _secret(self, field: str) -> str | None:
        given: SecretStr | None = getattr(self, field)
        if given is not None:
            return given.get_secret_value()
        if self.environment != "development":
            return None
        return _kept_secret(self.data_dir.resolve() / SECRETS_DIR, SECRET_FILES[field])

    def require_secrets(self, process: str, *fields: str) -> None:
        """Refuse to start `process` outside development without the secrets it needs (`signing_key`,
        `metrics_tenant_salt`); in development they are made and kept in the data dir."""
        missing = [
            SECRET_VARIABLES[f] for f in fields if self.environment != "development" and getattr(self, f) is None
        ]
        if missing:
            raise OpenAccessRefused(
                f"refusing to start {process} with MNEMOFLOW_ENVIRONMENT={self.environment} and no "
                f"{' and no '.join(missing)}: each is a secret of at least 12 random characters (python -c "
                "'import secrets; print(secrets.token_urlsafe(32))'), the same for every process of the deployment "
                "(docs/configuration.md)"
            )

    @property
    def all_api_keys(self) -> dict[str, str]:
        """API key → tenant, including OpenMemory's single OM_API_KEY."""
        keys = dict(self.api_keys)
        if self.om_api_key:
            keys.setdefault(self.om_api_key, self.default_user_id)
        return keys

    @property
    def limits(self) -> InputLimits:
        return InputLimits(
            max_content_chars=self.max_content_chars,
            max_content_tokens=self.max_content_tokens,
            max_query_tokens=self.max_query_tokens,
            max_tags=self.max_tags,
            max_tag_chars=self.max_tag_chars,
            max_metadata_bytes=self.max_metadata_bytes,
            max_batch_items=self.max_batch_items,
        )

    @property
    def restarts(self) -> RestartPolicy:
        return RestartPolicy(
            first_delay=self.restart_delay_seconds,
            max_delay=self.restart_max_delay_seconds,
            reset_after=self.restart_reset_seconds,
            crash_loop_crashes=self.crash_loop_crashes,
            crash_loop_window=self.crash_loop_seconds,
        )

    @property
    def rate_limits(self) -> RateLimits:
        return RateLimits(
            enabled=self.rate_limits_enabled,
            queries=Bucket(self.rate_limit_query_burst, self.rate_limit_queries_per_second),
            writes=Bucket(self.rate_limit_write_burst, self.rate_limit_writes_per_second),
            ingest=Bucket(self.rate_limit_ingest_burst, self.rate_limit_ingests_per_second),
        )

    @property
    def gateway_processes(self) -> int:
        """How many gateway processes serve requests: MNEMOFLOW_GATEWAY_WORKERS, or one per two usable cores, 1 to 4."""
        return self.gateway_workers or default_gateway_workers(usable_cores())

    @property
    def embedding_bound(self) -> EmbeddingBound:
        return EmbeddingBound(
            concurrency=self.gateway_embed_concurrency or _EMBED_BOUND.slots(usable_cores(), self.gateway_processes),
            queue=self.gateway_embed_queue,
            wait_seconds=self.gateway_embed_wait_seconds,
        )

    @property
    def database_limits(self) -> DatabaseLimits:
        return DatabaseLimits(
            gateway=Timeouts(self.gateway_statement_timeout_ms, self.gateway_lock_timeout_ms),
            worker=Timeouts(self.worker_statement_timeout_ms, self.worker_lock_timeout_ms),
            maintenance=Timeouts(self.maintenance_statement_timeout_ms, self.maintenance_lock_timeout_ms),
            gateway_pool_size=self.gateway_pool_size or gateway_pool_for(self.gateway_processes),
            gateway_pool_timeout_seconds=self.gateway_pool_timeout_seconds,
        )


def is_loopback(host: str) -> bool:
    """Whether `host` is an address (or name) only this machine reaches; a Unix socket path is."""
    if host == "localhost" or host.startswith("/"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: a container's cpuset, taskset), else all of them."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
