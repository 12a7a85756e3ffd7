"""Shared parts of the benchmarks: a private stack (embedded or given URLs), a corpus, percentiles."""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import psutil
import psycopg
from pgvector import Vector

from infra.embedded import EmbeddedPostgres, EmbeddedRedis, free_port, recreate_database
from infra.migrate import upgrade
from infra.processes import gateway_command, wait_for_worker, wait_healthy, worker_command
from shared.config import Settings
from shared.storage.rows import NewMemory

ROOT = Path(__file__).resolve().parent.parent
# One run's secrets, for the benchmark's own process and every process it starts alike (a development Settings
# without them would read the data dir under whatever directory it runs in).
os.environ.setdefault("MNEMOFLOW_SIGNING_KEY", secrets.token_urlsafe(32))
os.environ.setdefault("MNEMOFLOW_METRICS_TENANT_SALT", secrets.token_urlsafe(32))

SUBJECTS = [
    "Alice",
    "Bob",
    "the team",
    "our client",
    "the ops crew",
    "Grandma",
    "the landlord",
    "Dr. Chen",
    "the new intern",
    "my sister",
    "the vendor",
    "the board",
]
VERBS = [
    "mentioned",
    "decided",
    "remembered",
    "asked about",
    "complained about",
    "planned",
    "scheduled",
    "reviewed",
    "forgot",
    "celebrated",
    "documented",
    "postponed",
]
OBJECTS = [
    "the quarterly budget",
    "a trip to Lisbon",
    "the database migration",
    "green tea",
    "the kubernetes upgrade",
    "a birthday party",
    "the roof repair",
    "the onboarding checklist",
    "a new espresso machine",
    "the marketing launch",
    "the security audit",
    "piano lessons",
    "the wifi password",
    "a hiking route",
    "the invoice backlog",
    "the API rate limits",
    "a dentist appointment",
    "the garden fence",
]
DETAILS = [
    "on Monday",
    "next week",
    "yesterday",
    "because it was urgent",
    "after lunch",
    "with some doubts",
    "for the third time",
    "before the deadline",
    "in great detail",
    "with excitement",
    "by email",
    "during the standup",
]


def corpus(n: int, seed: int = 7) -> list[str]:
    """n distinct, varied sentences (a numbered detail keeps every one unique)."""
    rng = random.Random(seed)
    return [
        f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(DETAILS)} (note {i})"
        for i in range(n)
    ]


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]

    return {"p50": pct(50), "p95": pct(95), "p99": pct(99), "mean": statistics.fmean(ordered)}


@dataclass
class Servers:
    admin_url: str
    redis_url: str
    # The embedded servers' processes (None when DATABASE_URL / REDIS_URL point elsewhere), for CpuMeter.
    postgres_pid: int | None = None
    valkey_pid: int | None = None


class StackUrl(str):
    """The gateway's URL, as `stack()` yields it, knowing the stack's processes (for CpuMeter)."""

    worker_pid: int
    gateway_pid: int

    def __new__(cls, url: str, *, worker_pid: int, gateway_pid: int) -> StackUrl:
        made = super().__new__(cls, url)
        made.worker_pid, made.gateway_pid = worker_pid, gateway_pid
        return made


def _tree_cpu(root: psutil.Process) -> float:
    """CPU seconds of `root` and every live descendant, with the children each of them has reaped."""
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


class CpuMeter:
    """CPU seconds by role (gateway, worker with its parser children, PostgreSQL, Valkey, this process) between
    two readings: where a run's time went, whatever the wall clock says on a shared machine."""

    def __init__(self, roles: dict[str, int | None]) -> None:
        self.roles = {name: psutil.Process(pid) for name, pid in roles.items() if pid is not None}
        self._own = psutil.Process()  # this process alone: the stack it started is counted under its roles
        self._start = self.read()
        self.started = time.perf_counter()  # the wall clock at the start

    @classmethod
    def of_stack(cls, gateway: StackUrl, srv: Servers) -> CpuMeter:
        """From now, for the gateway and worker of `stack()` and the servers (the embedded ones; else not counted)."""
        return cls(
            {
                "gateway": gateway.gateway_pid,
                "worker": gateway.worker_pid,
                "postgres": srv.postgres_pid,
                "valkey": srv.valkey_pid,
            }
        )

    def read(self) -> dict[str, float]:
        out = {}
        for name, proc in self.roles.items():
            try:
                out[name] = _tree_cpu(proc)
            except psutil.Error:
                out[name] = 0.0
        own = self._own.cpu_times()
        out["bench client"] = own.user + own.system
        return out

    def since_start(self) -> dict[str, float]:
        now = self.read()
        return {name: now[name] - self._start.get(name, 0.0) for name in now}

    def restart(self) -> None:
        self._start = self.read()
        self.started = time.perf_counter()


@contextlib.contextmanager
def servers() -> Iterator[Servers]:
    """Embedded PostgreSQL + Valkey in a temp dir, unless DATABASE_URL / REDIS_URL are set."""
    with tempfile.TemporaryDirectory(prefix="mnemoflow-bench-") as tmp:
        pg = rd = None
        admin = os.environ.get("DATABASE_URL")
        if not admin:
            pg = EmbeddedPostgres(Path(tmp) / "pgdata", database="postgres")
            admin = pg.start()
        redis_url = os.environ.get("REDIS_URL")
        if not redis_url:
            rd = EmbeddedRedis(Path(tmp) / "valkey", persist=False)
            redis_url = rd.start()
        try:
            yield Servers(admin, redis_url, _postmaster(pg), rd.process.pid if rd and rd.process else None)
        finally:
            if rd:
                rd.stop()
            if pg:
                pg.stop()


def _postmaster(pg: EmbeddedPostgres | None) -> int | None:
    if pg is None:
        return None
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int((pg.pgdata / "postmaster.pid").read_text().splitlines()[0])
    return None


def fresh_database(admin_url: str, name: str) -> str:
    """Create (or recreate) a database and migrate it; returns its URL."""
    url = recreate_database(admin_url, name)
    upgrade(url)
    return url


def bench_settings(database_url: str) -> Settings:
    """Settings for in-process benchmark work: the provider of MNEMOFLOW_EMBEDDING_PROVIDER, synthetic by default."""
    return Settings(
        database_url=database_url,
        redis_url="redis://unused",
        embedding_provider=os.environ.get("MNEMOFLOW_EMBEDDING_PROVIDER", "synthetic"),  # type: ignore[arg-type]
    )


class HasPid(Protocol):
    @property
    def pid(self) -> int: ...


def wait_settled(procs: Sequence[HasPid], *, busy: float = 0.05, interval: float = 1.0, timeout: float = 60.0) -> float:
    """Block until `procs` and all their children together use under `busy` of one core over `interval`
    seconds (start-up work done); returns the seconds waited. Gives up quietly after `timeout`: a stack that
    never settles is measured as it is, with a note."""
    started = time.monotonic()

    def cpu_seconds() -> float:
        total = 0.0
        for proc in procs:
            try:
                parent = psutil.Process(proc.pid)
                family = [parent, *parent.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
            for each in family:
                try:
                    times = each.cpu_times()
                except psutil.NoSuchProcess:  # a child gone between listing and reading
                    continue
                total += times.user + times.system
        return total

    before = cpu_seconds()
    while time.monotonic() - started < timeout:
        time.sleep(interval)
        now = cpu_seconds()
        if now - before < busy * interval:
            return time.monotonic() - started
        before = now
    print(f"  note: the stack was still busy after {timeout:.0f} s; measuring anyway", flush=True)
    return time.monotonic() - started


def plain_dsn(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


@contextlib.contextmanager
def stack(
    database_url: str,
    redis_url: str,
    *,
    concurrency: int = 2,
    log_dir: Path | None = None,
    gateway_workers: int | None = 1,
    env: dict[str, str] | None = None,
    settled: bool = True,
) -> Iterator[StackUrl]:
    """Gateway + one worker on every queue, as child processes; yields the gateway URL once both are ready.
    `gateway_workers`: the gateway's processes (None: MNEMOFLOW_GATEWAY_WORKERS or its default); `env`: settings of
    theirs over this process's environment; `settled` false: as soon as /health and the worker say ready, as a
    client meets a stack just started.

    Ready means the worker answers a ping, and then that the stack has gone quiet: a worker still starting
    (imports, forking its pool, each pool process's ingest sandbox importing the parsers, ~2 s of CPU each
    after the ping) takes the CPU for seconds, and a measurement begun meanwhile measured that (at 100k the
    first 60 queries ran at twice the steady latency, and the pass's p95 at 1.4 times)."""
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix="mnemoflow-bench-logs-"))
    overrides = env or {}
    env = dict(
        os.environ,
        DATABASE_URL=database_url,
        REDIS_URL=redis_url,
        MNEMOFLOW_ENVIRONMENT="development",  # keyless, on loopback; outside development keys are required
        MNEMOFLOW_LOG_LEVEL="WARNING",
    )
    env.setdefault("MNEMOFLOW_EMBEDDING_PROVIDER", "synthetic")  # pure-throughput figures unless asked
    env.update(overrides)
    port = free_port()
    worker_name = f"bench-{port}"
    procs = []
    try:
        for name, args in (
            (
                "worker",
                worker_command(concurrency=concurrency, name=worker_name, log_level="WARNING", quiet_startup=True),
            ),
            ("gateway", gateway_command(host="127.0.0.1", port=port, log_level="warning", workers=gateway_workers)),
        ):
            log = open(log_dir / f"{name}.log", "wb")  # noqa: SIM115
            procs.append(
                subprocess.Popen([sys.executable, "-m", *args], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            )
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, procs[-1], log_path=log_dir / "gateway.log")
        wait_for_worker(
            Settings(database_url=database_url, redis_url=redis_url),
            worker_name,
            procs[0],
            log_path=log_dir / "worker.log",
        )
        if settled:
            wait_settled(procs)
        yield StackUrl(url, worker_pid=procs[0].pid, gateway_pid=procs[-1].pid)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


@contextlib.contextmanager
def gateway_at(url: str | None, *, provider: str, database: str, concurrency: int = 2) -> Iterator[str]:
    """`url` when given (a gateway already up), else a private stack on embedded servers (or DATABASE_URL /
    REDIS_URL) with a fresh database `database` and the embedding `provider`."""
    if url:
        yield url
        return
    os.environ["MNEMOFLOW_EMBEDDING_PROVIDER"] = provider
    with (
        servers() as srv,
        stack(fresh_database(srv.admin_url, database), srv.redis_url, concurrency=concurrency) as base,
    ):
        yield base


def copy_prepared(conn: psycopg.Connection, prepared: Sequence[NewMemory], *, indexed: bool) -> list[uuid.UUID]:
    """The floor of a store's write: prepared memories and their per-sector vectors (one walked) written by one binary
    COPY per table on a superuser's connection (no row-level security), uncommitted; the memories' ids."""
    ids = [uuid.uuid4() for _ in prepared]
    with conn.cursor() as cur:
        with cur.copy(
            "COPY memories (id, user_id, content, content_hash, primary_sector, sectors, tags, meta, salience, "
            "decay_lambda, confidence, classification_confidence, document_id, chunk_index, fact_hash) "
            "FROM STDIN WITH (FORMAT BINARY)"
        ) as copy:
            copy.set_types(
                [
                    "uuid",
                    "text",
                    "text",
                    "text",
                    "text",
                    "text[]",
                    "text[]",
                    "jsonb",
                    "float4",
                    "float4",
                    "float4",
                    "float4",
                    "uuid",
                    "int4",
                    "text",
                ]
            )
            for memory_id, m in zip(ids, prepared, strict=True):
                copy.write_row(
                    (
                        memory_id,
                        m.user_id,
                        m.content,
                        m.content_hash,
                        m.primary_sector,
                        list(m.sectors),
                        list(m.tags),
                        json.dumps(m.meta),
                        m.salience,
                        m.decay_lambda,
                        m.confidence,
                        m.classification_confidence,
                        m.document_id,
                        m.chunk_index,
                        m.fact_hash,
                    )
                )
        with cur.copy(
            "COPY memory_vectors (memory_id, sector, user_id, dim, model, indexed, walked, embedding) "
            "FROM STDIN WITH (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["uuid", "text", "text", "int2", "text", "bool", "bool", "vector"])
            for memory_id, m in zip(ids, prepared, strict=True):
                for n, (sector, sv) in enumerate(m.vectors.items()):  # one vector for every sector: walked once
                    vector = Vector(np.asarray(sv.vector, dtype=np.float32))
                    dim = sv.vector.shape[0]
                    copy.write_row((memory_id, sector, m.user_id, dim, sv.model, indexed, n == 0, vector))
    return ids
