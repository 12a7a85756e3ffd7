"""What keeps the stack answering under load: tenants' request quotas (token buckets), the database's time
limits, and fair queues between tenants (a message's broker priority from its tenant's open work). Parameters and
pure rules only (the buckets run in Valkey, services/gateway/ratelimit.py; the timeouts are set on each engine's
connections, shared/db.py; the open work is counted in shared/storage/backlog.py)."""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shared.embedding.cost import windows
from shared.text import estimate_tokens


class Quota(enum.StrEnum):
    """The separate budgets of a tenant: queries, memories written, documents ingested."""

    QUERIES = "queries"
    WRITES = "writes"
    INGEST = "ingest"


# Queries and writes are charged the model windows they fill (shared.embedding.cost): a query or a memory of up to
# 256 tokens is 1, so ordinary use counts as it always did and a long text pays for what it costs.
UNITS = {
    Quota.QUERIES: "query windows (256 tokens each)",
    Quota.WRITES: "memory windows (256 tokens each)",
    Quota.INGEST: "documents ingested",
}
BUCKET_KEY_PREFIX = "mnemoflow:ratelimit"


def bucket_key(quota: Quota, tenant: str) -> str:
    """Where a tenant's bucket of `quota` lives in Valkey (erased with the tenant)."""
    return f"{BUCKET_KEY_PREFIX}:{quota}:{tenant}"


@dataclass(frozen=True)
class Bucket:
    """A token bucket: `burst` units at once, refilled at `per_second`."""

    burst: int
    per_second: float

    def cost_of(self, units: int) -> int:
        """What a request of `units` takes: more than the burst would never fit, so it takes a full bucket."""
        return max(1, min(units, self.burst))

    def seconds_until(self, cost: int, tokens: float) -> int:
        """Whole seconds until `cost` fits in a bucket holding `tokens` (what Retry-After says; at least 1)."""
        return max(1, math.ceil((cost - tokens) / self.per_second))


@dataclass(frozen=True)
class RateLimits:
    """Per-tenant buckets, shared by every gateway process. The defaults leave ordinary heavy use alone (3,000
    adds back to back, a 50,000-item batch, 1,000 queries a minute) and stop a runaway client."""

    enabled: bool = True
    queries: Bucket = Bucket(burst=1_000, per_second=50.0)
    writes: Bucket = Bucket(burst=100_000, per_second=1_000.0)  # memory windows: a short add is 1, a batch its items
    # Documents, pages and uploads: about what one two-core stack parses (14-20 small documents a second). What
    # holds a bulk upload to the workers' pace is the tenant's backlog (MNEMOFLOW_INGEST_MAX_QUEUED); at 2 a second
    # this bucket held a tenant's 180 PDFs to 4.4 a second where the pipeline does 19 (docs/benchmarks.md).
    ingest: Bucket = Bucket(burst=100, per_second=20.0)

    def bucket(self, quota: Quota) -> Bucket:
        return {Quota.QUERIES: self.queries, Quota.WRITES: self.writes, Quota.INGEST: self.ingest}[quota]


@dataclass(frozen=True)
class EmbeddingBound:
    """The gateway's in-process embeddings (`shared.embedding.gate`): at once per process (unset: the process's
    share of the usable cores), and how much may wait, in model windows, and for how long before a 503 with
    Retry-After."""

    concurrency: int | None = None
    # 128 windows: 64 concurrent queries wait (a window is ~12 ms of a core for MiniLM), four 8,192-token adds do
    queue: int = 128
    wait_seconds: float = 10.0

    def slots(self, cores: int, processes: int) -> int:
        return self.concurrency or max(1, cores // max(1, processes))


@dataclass(frozen=True)
class Timeouts:
    """PostgreSQL's `statement_timeout` and `lock_timeout` in milliseconds (0: none)."""

    statement_ms: int
    lock_ms: int


NO_TIMEOUTS = Timeouts(0, 0)  # index DDL at start-up: it must finish, however long another process's takes


@dataclass(frozen=True)
class DatabaseLimits:
    """Time limits by kind of work: a request must answer or give up well within a client's patience, a task
    may take longer, and the lifecycle cycles' transactions longer still. A timed-out statement fails its
    request with 503 (the gateway) or its task step, which is retried."""

    gateway: Timeouts = Timeouts(statement_ms=15_000, lock_ms=5_000)
    worker: Timeouts = Timeouts(statement_ms=300_000, lock_ms=60_000)  # every process but the gateway
    # decay and merge transactions: longer, within a task's time limit (MNEMOFLOW_TASK_TIME_LIMIT_SECONDS, 15 min)
    maintenance: Timeouts = Timeouts(statement_ms=600_000, lock_ms=300_000)
    gateway_pool_size: int = 15  # per gateway process: connections kept, and as many again on demand
    gateway_pool_timeout_seconds: float = 10.0  # a request waiting longer for a connection is answered 503


# The gateway's request pool with one process (MNEMOFLOW_GATEWAY_POOL_SIZE unset); with N processes each keeps its
# share, never fewer than GATEWAY_POOL_FLOOR: N processes split the same requests, not N times as many.
SINGLE_GATEWAY_POOL = DatabaseLimits.gateway_pool_size
GATEWAY_POOL_FLOOR = 5
MAX_DEFAULT_GATEWAY_WORKERS = 4
# Connections each process may hold besides its request pool (services/gateway/app.py, workers/app.py).
GATEWAY_STORE_WIDE_CONNECTIONS = 4  # the gateway's maintenance-role pool: 2 kept, 2 on demand
WORKER_PROCESS_CONNECTIONS = 8  # a worker pool process: the app role's 2 + 2 and the maintenance role's 2 + 2
CONNECTION_HEADROOM = 10  # migrations, a backup, psql, start-up checks: never counted by any pool


def default_gateway_workers(cores: int) -> int:
    """Gateway processes when MNEMOFLOW_GATEWAY_WORKERS is unset: one per two cores, at least one, at most four.

    The gateway shares its machine with PostgreSQL and the workers: on 2 cores a second process served no more adds or
    queries than one (`bench.clients`, docs/benchmarks.md "Many clients") and raised p95 at 32 clients, for ~350 MB."""
    return max(1, min(cores // 2, MAX_DEFAULT_GATEWAY_WORKERS))


def gateway_pool_for(workers: int) -> int:
    """A gateway process's request pool when MNEMOFLOW_GATEWAY_POOL_SIZE is unset: one process's pool shared out."""
    return max(GATEWAY_POOL_FLOOR, math.ceil(SINGLE_GATEWAY_POOL / max(1, workers)))


@dataclass(frozen=True)
class ConnectionBudget:
    """The most connections the processes can open at once, against what PostgreSQL allows.

    gateway processes × (2 × pool + full-text threads + store-wide) + worker processes × 8 + headroom."""

    gateway_processes: int
    gateway_pool: int
    fulltext_threads: int
    worker_processes: int = 0

    @property
    def per_gateway(self) -> int:
        return 2 * self.gateway_pool + self.fulltext_threads + GATEWAY_STORE_WIDE_CONNECTIONS

    @property
    def total(self) -> int:
        gateways = self.gateway_processes * self.per_gateway
        return gateways + self.worker_processes * WORKER_PROCESS_CONNECTIONS + CONNECTION_HEADROOM

    def refusal(self, max_connections: int, reserved: int) -> str | None:
        """Why the configuration cannot fit a server of `max_connections` (`reserved` of them for superusers), or
        None when it fits."""
        available = max_connections - reserved
        if self.total <= available:
            return None
        workers = (
            f" + {self.worker_processes} worker processes × {WORKER_PROCESS_CONNECTIONS}"
            if self.worker_processes
            else ""
        )
        return (
            f"{self.gateway_processes} gateway processes × (2 × {self.gateway_pool} pooled + {self.fulltext_threads} "
            f"full-text + {GATEWAY_STORE_WIDE_CONNECTIONS} store-wide){workers} + {CONNECTION_HEADROOM} headroom = "
            f"{self.total} connections, but PostgreSQL allows {available} (max_connections {max_connections} - "
            f"{reserved} reserved). Lower MNEMOFLOW_GATEWAY_WORKERS or MNEMOFLOW_GATEWAY_POOL_SIZE, or raise the "
            "server's max_connections (docs/scaling.md#connections)"
        )


# Fair queues. The Redis transport keeps one list per priority on each queue and a worker pops every queue's
# priority 0 list before any priority 1 list (kombu's BRPOP names the keys priority-major), so the tenant with the
# least open work is served first: one tenant's backlog cannot hold another's small batch behind it.

# Redis: 0 is served first. Ten steps (kombu's default is [0, 3, 6, 9], which rounds 1 and 2 down to 0).
PRIORITY_STEPS: tuple[int, ...] = tuple(range(10))
HIGHEST = PRIORITY_STEPS[0]
LOWEST = PRIORITY_STEPS[-1]
# A tenant with at most this much open work (model windows: a 10-item batch of chat turns is ~10) is at the top.
QUIET_WINDOWS = 16
# The least backlog at LOWEST; counting past it changes nothing, so a backlog is counted up to this.
SATURATION_WINDOWS = (QUIET_WINDOWS << (LOWEST - 1)) + 1
# A document not yet parsed counts as one chunk of the default size (2048 tokens: 8 windows).
DOCUMENT_WINDOWS = 8
# The most model work one task of a document's takes on, by estimate (one chunk of the default size): what a
# quieter tenant's chunk may wait behind on a busy worker process. Measured on a loaded 2-core box, tasks of 16
# took 7-12 s (tables are ~1.8 tokens per estimated one); a task's own cost (claim, statements) is ~50 ms.
DOCUMENT_TASK_WINDOWS = 8


def priority_for(backlog_windows: int) -> int:
    """The broker priority of a tenant's message when it has `backlog_windows` of work open (this message's
    included): HIGHEST up to QUIET_WINDOWS, then one step lower per doubling, LOWEST from SATURATION_WINDOWS."""
    if backlog_windows <= QUIET_WINDOWS:
        return HIGHEST
    steps = (backlog_windows - 1) // QUIET_WINDOWS  # 1 from 17 windows, 2 from 33, 4 from 65, ...
    return min(LOWEST, HIGHEST + steps.bit_length())


def item_cost(item: Mapping[str, Any]) -> int:
    """An item's model work in windows, by its content's token estimate (an item without content, a re-embed's
    id, counts one)."""
    return windows(estimate_tokens(str(item.get("content") or "")))


def chunk_cost(items: Iterable[Mapping[str, Any]]) -> int:
    """A chunk's model work in windows: its items' `item_cost`."""
    return sum(item_cost(item) for item in items)


def specs_cost(chunks: Iterable[Any]) -> int:
    """The model work of chunks about to be written (`shared.jobs.ChunkSpec`s), in windows."""
    return sum(chunk_cost(chunk.items) for chunk in chunks)
