"""Prometheus metrics of the gateway, served at /metrics.

The gateway may run as several processes (services/gateway/serve.py): each then writes its values into files of
its own and /metrics sums every process's (prometheus_client's multiprocess mode, shared/monitoring/metrics.py).
So every value is a Counter or a Histogram; what is read from the store at scrape time (documents, tiers, the fresh
tier) comes from collectors, whichever process answers. Gauges would need a `multiprocess_mode`: there are none.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from sqlalchemy.orm import Session

from shared.db import Database
from shared.memory.sectors import SECTORS
from shared.storage import documents as document_store
from shared.storage import memories as memory_store
from shared.storage import vectors as vector_store
from shared.text import opaque_label

log = logging.getLogger("mnemoflow.gateway")

REQUESTS = Counter("mnemoflow_http_requests_total", "HTTP requests", ["method", "route", "status"])
LATENCY = Histogram(
    "mnemoflow_http_request_seconds",
    "HTTP request latency",
    ["method", "route"],
    buckets=(0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
MEMORIES_ADDED = Counter("mnemoflow_memories_added_total", "Memories stored synchronously", ["deduplicated"])
QUERIES = Counter("mnemoflow_queries_total", "Queries answered", ["outcome"])
QUERY_MATCHES = Histogram(
    "mnemoflow_query_matches", "Matches returned per query", buckets=(0, 1, 2, 4, 8, 16, 32, 64, 128, 200)
)
# Where a query's server time goes, each stage of the read path (shared/retrieval: embed, dense, lexical, fetch,
# score, payload, ...; `total` the whole read path, less than the stages' sum where some ran side by side): what
# `explain: true` shows one query, for every query. Its `_sum` over its `_count` is a stage's mean over a window.
QUERY_STAGES = Histogram(
    "mnemoflow_query_stage_seconds",
    "Server time of each stage of a query's read path (total: the whole read path)",
    ["stage"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1),
)
JOBS_ENQUEUED = Counter("mnemoflow_jobs_enqueued_total", "Jobs accepted", ["kind"])
AFTERMATH_RECORDS = Counter(
    "mnemoflow_query_aftermath_records_total",
    "Queries whose bookkeeping (active count, stats, reinforcement, embed log) was written after the response, "
    "in batches; outcome failed: a batch that raised (its reinforcement and log lines are lost)",
    ["outcome"],
)
ENQUEUE_FAILURES = Counter(
    "mnemoflow_enqueue_failures_total",
    "Tasks that could not be sent to the broker (the sweeper re-sends them)",
)
HOT_ROW_LOOKUPS = Counter(
    "mnemoflow_hot_row_cache_lookups", "Hot-tier row payload lookups by outcome (hit: Redis had it)", ["outcome"]
)
for _outcome in ("hit", "miss"):  # exported from the start, at 0
    HOT_ROW_LOOKUPS.labels(_outcome)


def hot_row_lookups(hits: int, misses: int) -> None:
    """Count one lookup of the hot-row cache (shared/retrieval/hot_rows.py)."""
    if hits:
        HOT_ROW_LOOKUPS.labels("hit").inc(hits)
    if misses:
        HOT_ROW_LOOKUPS.labels("miss").inc(misses)


BAD_SEALS = Counter(
    "mnemoflow_cache_bad_seals_total",
    "Cache entries whose seal did not hold (written by something without the key, or moved), read as misses",
    ["cache"],
)


def bad_seals(cache: str) -> Callable[[int], None]:
    """A counter of the entries of `cache` (row, query_embedding) whose seal did not hold."""
    return BAD_SEALS.labels(cache).inc


RATE_LIMITED = Counter("mnemoflow_rate_limited_total", "Requests refused with 429, by quota", ["quota"])
RATE_LIMIT_UNCHECKED = Counter(
    "mnemoflow_rate_limit_unchecked_total",
    "Requests let through without a quota check because Redis did not answer (rate limits fail open)",
)

# Recall seed: injection rate = injected / all, retrieval blindness = blind / all, per tenant. The tenant label
# is a keyed hash of the user_id (MNEMOFLOW_METRICS_TENANT_SALT; `mnemoflow tenant-label <user_id>` computes it),
# so no tenant's name reaches /metrics or the systems that scrape it, and it is capped
# (MNEMOFLOW_METRICS_MAX_TENANTS distinct values per process; the rest count as "_other").
TENANT_QUERIES = Counter(
    "mnemoflow_tenant_queries_total",
    "Queries per tenant by outcome: injected (a memory passed the gate), blind (candidates, none passed), no_memories",
    ["tenant", "outcome"],
)
_tenants: set[str] = set()


def tenant_label(tenant: str, limit: int, salt: str = "") -> str:
    label = opaque_label(tenant, salt)
    if label in _tenants:
        return label
    if len(_tenants) < limit:
        _tenants.add(label)
        return label
    return "_other"


DOCUMENTS_ACCEPTED = Counter(
    "mnemoflow_documents_accepted_total",
    "Ingest requests by format and outcome (queued, existing, retried, refused)",
    ["format", "outcome"],
)


class DocumentsCollector:
    """`mnemoflow_documents{format,status}`: documents in the store by format and status (done, failed, …),
    read from PostgreSQL at scrape time, so it counts what every ingest worker of the fleet did."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "mnemoflow_documents", "Ingested documents by format and status", labels=["format", "status"]
        )
        try:
            with self.db.session() as session:
                for fmt, status, count in document_store.status_counts(session):
                    family.add_metric([fmt, status], count)
        except Exception as exc:  # a scrape must not fail because the database hiccupped
            log.warning("could not count documents for /metrics: %s", exc)
        yield family

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # no query when registering


class StoreCounts:
    """A gauge family counted in PostgreSQL at most every `MAX_AGE_SECONDS` (between readings a scrape gets the last
    one; a failed reading keeps it too)."""

    MAX_AGE_SECONDS = 60.0
    NAME = ""
    HELP = ""
    LABELS: tuple[str, ...] = ()

    def __init__(self, db: Database) -> None:
        self.db = db
        self._counts: list[tuple[list[str], int]] = []
        self._read_at = float("-inf")

    def count(self, session: Session) -> list[tuple[list[str], int]]:
        """(label values, count) pairs, read with the store-wide role."""
        raise NotImplementedError

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if time.monotonic() - self._read_at >= self.MAX_AGE_SECONDS:
            try:
                with self.db.session() as session:
                    self._counts = self.count(session)
                self._read_at = time.monotonic()
            except Exception as exc:  # a scrape must not fail because the database hiccupped
                log.warning("could not read %s for /metrics: %s", self.NAME, exc)
        family = GaugeMetricFamily(self.NAME, self.HELP, labels=list(self.LABELS))
        for labels, count in self._counts:
            family.add_metric(labels, count)
        yield family

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # no query when registering


class TiersCollector(StoreCounts):
    """`mnemoflow_memories{sector,tier}`: memories in the store by primary sector and tier (hot, warm, cold), read
    at most once a minute (a count of the whole store)."""

    NAME = "mnemoflow_memories"
    HELP = "Memories in the store by primary sector and tier"
    LABELS = ("sector", "tier")

    def count(self, session: Session) -> list[tuple[list[str], int]]:
        return [([sector, tier], n) for sector, tier, n in memory_store.tier_counts(session)]


class FreshCollector(StoreCounts):
    """`mnemoflow_fresh_vectors{sector}`: vectors stored by bulk writes and not yet merged into their sector's HNSW
    index, read at most every 15 s: the backlog a bulk import leaves, which its tenant's queries read until the
    merge drains it (0 for every sector once it has)."""

    MAX_AGE_SECONDS = 15.0
    NAME = "mnemoflow_fresh_vectors"
    HELP = "Vectors waiting for the merge into their sector's HNSW index (the fresh tier)"
    LABELS = ("sector",)

    def count(self, session: Session) -> list[tuple[list[str], int]]:
        waiting = vector_store.fresh_by_sector(session)
        return [([sector], waiting.get(sector, 0)) for sector in SECTORS]
