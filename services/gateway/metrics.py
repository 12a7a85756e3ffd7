"""Prometheus metrics of the gateway, served at /metrics."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

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
JOBS_ENQUEUED = Counter("mnemoflow_jobs_enqueued_total", "Jobs accepted", ["kind"])
ENQUEUE_FAILURES = Counter(
    "mnemoflow_enqueue_failures_total",
    "Tasks that could not be sent to the broker (the sweeper re-sends them)",
)
