"""Prometheus metrics of processes that fork, and the broker's queue depths, for any of Mnemoflow's processes.

A prefork Celery worker runs its tasks in several pool processes with memories of their own: counters kept in
memory would be each process's, and a scrape would reach only one of them. In prometheus_client's multiprocess
mode each process writes its values into files of its own in one directory, and the endpoint sums every file
(`MultiProcessCollector`), a dead process's included, so nothing it counted is lost. The workers use this
(workers/metrics.py), and so does the gateway run as several uvicorn processes (services/gateway/serve.py calls
`use_directory` before they start; each process's lifespan builds the `registry` its /metrics route reads).

Queue depths are read from the broker when scraped (one pipelined round trip), not counted by the tasks.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer

import redis
from prometheus_client import CollectorRegistry, multiprocess, start_http_server, values
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from shared.queueing import queue_lengths

log = logging.getLogger("mnemoflow.metrics")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
QUEUE_DEPTH = "mnemoflow_queue_depth"
BROKER_UNACKED = "mnemoflow_broker_unacked_messages"
BROKER_UP = "mnemoflow_broker_up"


def use_directory(directory: Path) -> Path:
    """Make this process, and every process it forks from now on, keep its metrics in `directory` (created; an
    earlier run's files removed: a counter starts from zero again when its process does).

    Call it before any metric value exists (metrics with labels make theirs at `.labels()`): prometheus_client picks
    its value class from the environment when it is imported, so it is picked again here.
    """
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink()
    os.environ[MULTIPROC_ENV] = str(directory)
    values.ValueClass = values.get_value_class()
    return directory


def registry(*collectors: Collector) -> CollectorRegistry:
    """A registry that sums every process's files in the directory, and reads `collectors` at scrape time."""
    if MULTIPROC_ENV not in os.environ:
        raise RuntimeError("call use_directory() first: there is no multiprocess directory to read")
    summed = CollectorRegistry()
    multiprocess.MultiProcessCollector(summed)
    for collector in collectors:
        summed.register(collector)
    return summed


class Endpoint:
    """A metrics endpoint served over HTTP by a thread of the process that started it."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self.server, self.thread, self.owner = server, thread, os.getpid()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def release_in_child(self) -> None:
        """In a process forked from the owner: close the inherited listening socket, so that only the owner
        holds the port (an orphaned child would otherwise keep a restarted worker from binding it)."""
        if os.getpid() != self.owner:
            self.server.socket.close()

    def close(self) -> None:
        if os.getpid() == self.owner:
            self.server.shutdown()
            self.server.server_close()


def serve(summed: CollectorRegistry, host: str, port: int) -> Endpoint:
    """Serve `summed` at http://host:port/metrics (any path answers) from a daemon thread."""
    server, thread = start_http_server(port, addr=host, registry=summed)
    return Endpoint(server, thread)


class QueueDepths(Collector):
    """`mnemoflow_queue_depth{queue}`: messages waiting in each queue of the broker (Redis lists, every priority
    summed); `mnemoflow_broker_unacked_messages`: taken by a worker, not yet acknowledged (running or reserved);
    `mnemoflow_broker_up`: 1 when the broker answered this scrape, 0 when it did not (then no depths)."""

    def __init__(
        self, connect: Callable[[], redis.Redis], queues: Sequence[str], transport_options: Mapping[str, Any]
    ) -> None:
        self.connect, self.queues, self.transport_options = connect, tuple(queues), dict(transport_options)
        self._client: redis.Redis | None = None
        self._lock = threading.Lock()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = GaugeMetricFamily(BROKER_UP, "Whether the broker answered this scrape's queue-depth read (1) or not (0)")
        try:
            with self._lock:
                if self._client is None:
                    self._client = self.connect()
                depths, unacked = queue_lengths(self._client, self.queues, self.transport_options)
        except (redis.RedisError, OSError) as exc:
            log.warning("could not read the queue depths for /metrics: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        family = GaugeMetricFamily(QUEUE_DEPTH, "Messages waiting in each broker queue", labels=["queue"])
        for queue, depth in depths.items():
            family.add_metric([queue], depth)
        yield family
        taken = GaugeMetricFamily(BROKER_UNACKED, "Messages taken by a worker and not yet acknowledged")
        taken.add_metric([], unacked)
        yield taken

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # no broker call when registering
