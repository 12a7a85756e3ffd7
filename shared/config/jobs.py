"""Settings of the job pipeline: batch chunks, the fresh tier's merge, retries, the sweeper, the broker."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from shared.api.common import Provider
from shared.config.parsing import env


class JobSettings(BaseModel):
    if TYPE_CHECKING:  # a field of EmbeddingSettings; the composed Settings has both
        embedding_provider: Provider

    # Items per chunk task; unset: 256 for the HTTP providers, 500 for the others (the local model: ~2 s of its
    # work a chunk on two cores). A chunk pays its claim, its statements and a merge request once: at 500 the
    # engine's CPU beside the local model fell by about a sixth against 100 (docs/experiments.md, "Larger chunks
    # for the local model"). A retry redoes one chunk.
    batch_chunk_size: int | None = Field(default=None, ge=1, le=10_000)
    merge_batch_size: int = Field(default=1000, ge=1, le=100_000)
    merge_time_budget_seconds: float = Field(default=30.0, gt=0)
    # Connections one merge run inserts into HNSW on at once (each takes its own batches: FOR UPDATE SKIP
    # LOCKED). An HNSW insert is one backend's CPU: a server with cores to spare drains a burst's fresh tier
    # faster. One by default: on 2 cores shared with the queries, two drained a 100k burst 16 % faster and the
    # queries meanwhile were 20 % slower at p95 (bench.ingest, docs/experiments.md).
    merge_connections: int = Field(default=1, ge=1, le=8)
    # The merge into HNSW yields to ingestion (embed queues not empty) while fewer than this many vectors wait in
    # the fresh tier; past it, it runs beside ingestion. Not a bound on the fresh tier: a burst can store vectors
    # faster than the merge indexes them (bench.ingest). 0: never yield. At 200,000 a 100k burst leaves the
    # merge for after it: 15-19 % faster than at 50,000, its queries as fast (each merge run keeps the read path's
    # statistics current, yielding or not: docs/experiments.md, "A burst's queries planned on empty tables").
    merge_yield_max_fresh: int = Field(default=200_000, ge=0)

    # Fair queues (shared/backpressure.py): a tenant's chunks and documents are sent at a broker priority that falls
    # as its open work grows, so a quiet tenant's batch overtakes another's backlog. Off: every message at the
    # default priority, first come first served.
    fair_queues: bool = True

    # Attempts count when a worker claims the work (shared/storage/leases.py), never per message.
    job_max_attempts: int = Field(default=5, ge=1)
    # How long a claim holds without renewal: a worker that dies loses its work to the sweeper this long after
    # its last renewal (a document's extraction renews it every third of this).
    job_lease_seconds: float = Field(default=20.0, ge=2)
    # Work sent but never claimed this long after: its message was lost (or the queue is that far behind, in
    # which case the duplicate finds the work claimed or done and leaves).
    job_stall_seconds: int = Field(default=300, ge=5)
    # With the lease, the longest a dead worker's work waits: lease + interval (35 s by default).
    sweep_interval_seconds: float = Field(default=15.0, gt=0)
    # Longer than the longest task (their time limits below), or Redis re-delivers a message still being worked on.
    broker_visibility_timeout: int = Field(default=3600, ge=1)
    # Hard time limit of every task but a document's (whose limit follows its parsers' own limits).
    task_time_limit_seconds: int = Field(default=900, ge=10)
    applied_event_retention_days: float = Field(default=2.0, gt=0)
    # POST /import: the largest file (spooled to the gateway's disk while it is read, then planned in chunks).
    import_max_bytes: int = Field(default=2 * 1024**3, ge=1024)
    # An erasure deletes a tenant's rows this many at a time, each batch a transaction of its own.
    erase_batch_size: int = Field(default=5000, ge=1, le=1_000_000)
    worker_concurrency: int = Field(default=2, ge=1)
    # Niceness of the worker's processes (and the parsers they start), set when a worker starts; the gateway stays
    # at its own. Bulk writes then give the CPU back to queries first where both run on one machine (bench.isolation:
    # a query's p95 beside a bulk batch and a document upload). 0: unchanged.
    worker_nice: int = Field(default=10, ge=0, le=19)
    # Niceness of the worker's PostgreSQL backends (the HNSW merge, COPY, link searches run there), set on each
    # connection when the server runs on this machine as a user this process may renice (the embedded one);
    # otherwise ignored. Off by default: at 10 the writes kept less than half their rate beside queries.
    worker_backend_nice: int = Field(default=0, ge=0, le=19)
    # Niceness of the backends of the worker's store-wide work (the maintenance role's connections: the fresh tier's
    # merge into HNSW, decay, re-embedding, erasure), under the same conditions. The merge's HNSW inserts are the
    # largest CPU cost of a burst, and the one a query waits behind (bench.isolation); nicer, it gives the CPU to
    # queries and to the ingestion's COPY first, and catches up when they pause. 0: unchanged.
    maintenance_backend_nice: int = Field(default=10, ge=0, le=19)
    # How long a worker process retries its start-up (a database still starting) before it exits to be replaced.
    worker_start_seconds: float = Field(default=30.0, gt=0)
    # A worker's Prometheus endpoint (workers/metrics.py): unset or 0, none; `mnemoflow up` serves its worker's on
    # 9540 and its sweeper's on the port after, unless this names another port (or 0).
    worker_metrics_port: int | None = Field(default=None, ge=0, le=65535)
    worker_metrics_host: str = "127.0.0.1"
    # Where the worker's pool processes keep their metric files (one directory per worker, emptied when it starts);
    # unset: a temporary directory of its own.
    worker_metrics_dir: Path | None = Field(
        default=None, validation_alias=env("MNEMOFLOW_WORKER_METRICS_DIR", "PROMETHEUS_MULTIPROC_DIR")
    )

    @property
    def soft_time_limit(self) -> int:
        """A task's soft limit: time to record its failure before the hard limit kills its process."""
        return max(5, self.task_time_limit_seconds - 30)

    @property
    def chunk_size(self) -> int:
        """Items per chunk task (MNEMOFLOW_BATCH_CHUNK_SIZE, or the provider's default)."""
        if self.batch_chunk_size is not None:
            return self.batch_chunk_size
        return {"openai": 256, "ollama": 256}.get(self.embedding_provider, 500)
