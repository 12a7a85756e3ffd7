"""Bulk ingest throughput: POST /memory/batch until every memory is stored and queryable.

Baselines, measured in the same run on the same machine:
- the store's own rate: a plain COPY of the same rows (memories with their fact hashes, as the engine writes
  them since 2026-12-07, and their per-sector vectors) into the same HNSW-indexed tables of a fresh database
  (and unindexed, the floor);
- the model's own rate: the provider embedding the same texts in as many processes as the worker has,
  nothing else running (`raw model`). End to end / raw model is the pipeline's overhead.

Besides the rates it prints:
- queryable after success: as soon as the poller (one GET at a time, in the order sent) sees a job succeeded,
  one of its texts is queried with a plain client's body (`query`, `user_id`, `k`) until it is in the results;
  those queries' own round trips, and the server's mean time per stage of them (the only queries of the burst);
- where the time goes, per job and in total, from the job record (the gateway's transaction start, each chunk's
  `done_at` and its `embed_ms`/`store_ms`/`work_ms`) and the client's clock (same machine), and the CPU seconds
  of the gateway, the worker and PostgreSQL over the ingest;
- query p95 while the fresh tier drains into the index (queries back to back, at most --queries) against as
  many queries once it settled, on the same store, and the server's mean time per stage of the read path in
  both (the gateway's `mnemoflow_query_stage_seconds`): where the drain's queries pay.

    python -m bench.ingest --sizes 10000 100000                 # synthetic embeddings
    python -m bench.ingest --provider local --sizes 5000         # the default MiniLM model
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import httpx
import psutil
import psycopg
from pgvector.psycopg import register_vector
from prometheus_client.parser import text_string_to_metric_families

from bench.common import bench_settings, copy_prepared, corpus, fresh_database, plain_dsn, servers, stack
from shared.api.memories import MemoryCreate
from shared.config import Settings
from shared.db import schema_session
from shared.embedding.factory import create_embedder, embedder_for
from shared.memory.engine import MemoryEngine
from shared.storage.sector_models import ensure_store_model

USER = "bench"


def baseline_copy(database_url: str, texts: list[str], *, indexed: bool) -> tuple[float, float]:
    """COPY the same prepared rows into the same tables; returns (seconds, prepare_seconds).

    indexed=True puts every vector through the live HNSW index (the issue's baseline);
    indexed=False is the unindexed COPY floor (what the fresh tier pays).
    """
    settings = bench_settings(database_url)
    engine = MemoryEngine(settings, create_embedder(settings))
    with schema_session(settings, "mnemoflow.bench") as session:  # the model's HNSW index, as in a real store
        ensure_store_model(session, engine.embedder)
    started = time.perf_counter()
    prepared, _ = engine.prepare([MemoryCreate(content=t) for t in texts], USER)
    prepare_s = time.perf_counter() - started
    with psycopg.connect(plain_dsn(database_url)) as conn:
        register_vector(conn)
        started = time.perf_counter()
        copy_prepared(conn, prepared, indexed=indexed)
        conn.commit()
        return time.perf_counter() - started, prepare_s


def _embed_share(args: tuple[str, list[str]]) -> float:
    """In a fresh process: build the provider, warm it up, embed the share; returns seconds spent embedding."""
    provider, texts = args
    settings = Settings(embedding_provider=provider)  # type: ignore[arg-type]
    embedder = embedder_for(settings, provider, dim=None)
    embedder.embed(texts[:32])
    started = time.perf_counter()
    for start in range(0, len(texts), settings.chunk_size):  # the workers' chunk size
        embedder.embed(texts[start : start + settings.chunk_size])
    return time.perf_counter() - started


def raw_model_rate(provider: str, texts: list[str], processes: int) -> float:
    """Sentences/s of the provider alone in `processes` processes (the worker's pool size), texts split evenly."""
    shares = [(provider, texts[i::processes]) for i in range(processes)]
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        seconds = pool.map(_embed_share, shares)
    return len(texts) / max(seconds)


@dataclass
class Job:
    """One POST /memory/batch as the client saw it (epoch seconds: the database's clock is the same machine's)."""

    id: str
    probe: str  # one of its texts, queried as soon as the job is seen succeeded
    posted: float  # the POST sent
    answered: float  # its 202 received
    seen: float = 0.0  # the poller saw it succeeded
    found: float = 0.0  # the probe was in a query's results
    tries: int = 0
    query_ms: list[float] = field(default_factory=list)  # each probe query's round trip


def _poll(
    gateway: str, jobs: list[Job], posting: threading.Event, interval: float, k: int, errors: list[BaseException]
) -> None:
    """Follow the jobs in the order sent, one GET at a time (the polling costs the stack little); as soon as one
    has succeeded, query one of its texts (the plain client's body) until it is in the results. What goes wrong
    lands in `errors` (the main thread raises it)."""
    try:
        _follow(gateway, jobs, posting, interval, k)
    except BaseException as exc:
        errors.append(exc)


def _follow(gateway: str, jobs: list[Job], posting: threading.Event, interval: float, k: int) -> None:
    with httpx.Client(base_url=gateway, timeout=300) as client:
        index = 0
        while posting.is_set() or index < len(jobs):
            if index >= len(jobs):
                time.sleep(interval / 2)
                continue
            job = jobs[index]
            state = client.get(f"/jobs/{job.id}", params={"user_id": USER}).json()
            if state["status"] == "failed":
                raise RuntimeError(f"job failed: {state}")
            if state["status"] != "succeeded":
                time.sleep(interval)
                continue
            job.seen = time.time()
            deadline = job.seen + 30
            while time.time() < deadline:
                job.tries += 1
                body = {"query": job.probe, "user_id": USER, "k": k}
                asked = time.perf_counter()
                found = client.post("/memory/query", json=body).json()["matches"]
                job.query_ms.append((time.perf_counter() - asked) * 1000)
                if any(m["content"] == job.probe for m in found):
                    job.found = time.time()
                    break
                time.sleep(0.05)
            else:
                print(f"  warning: job {job.id}: its text not in the top {k} 30 s after success: {job.probe!r}")
            index += 1


def _fresh_left(conn: psycopg.Connection) -> bool:
    return bool(conn.execute("SELECT EXISTS (SELECT 1 FROM memory_vectors WHERE NOT indexed)").fetchone()[0])  # type: ignore[index]


def _queries(client: httpx.Client, texts: list[str], count: int, k: int, until: threading.Event | None) -> list[float]:
    """Up to `count` queries back to back (the plain client's body), stopped early when `until` is set; ms each."""
    rng = random.Random(11)
    samples = []
    for _ in range(count):
        if until is not None and until.is_set():
            break
        body = {"query": rng.choice(texts), "user_id": USER, "k": k}
        started = time.perf_counter()
        client.post("/memory/query", json=body).raise_for_status()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _stage_totals(client: httpx.Client) -> dict[str, tuple[float, float]]:
    """The gateway's `mnemoflow_query_stage_seconds` so far: (seconds, queries) per stage of the read path."""
    totals: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        if family.name != "mnemoflow_query_stage_seconds":
            continue
        for sample in family.samples:
            at = {"mnemoflow_query_stage_seconds_sum": 0, "mnemoflow_query_stage_seconds_count": 1}.get(sample.name)
            if at is not None:
                totals.setdefault(sample.labels["stage"], [0.0, 0.0])[at] = sample.value
    return {stage: (seconds, count) for stage, (seconds, count) in totals.items()}


def _stage_means(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]) -> dict[str, float]:
    """Mean milliseconds per query of each stage between two `_stage_totals`, over the queries that ran it."""
    means = {}
    for stage, (seconds, count) in after.items():
        seconds_before, count_before = before.get(stage, (0.0, 0.0))
        if count > count_before:
            means[stage] = (seconds - seconds_before) / (count - count_before) * 1000
    return means


def stage_table(stages: tuple[dict[str, float], dict[str, float]], drain_ms: float, idle_ms: float) -> str:
    """The server's mean time per stage of the drain's queries and the idle ones (/metrics), and what the client saw
    beyond the read path (`outside`: HTTP, the request's validation, serialising the answer)."""
    drain, idle = stages
    if not drain or not idle:
        return "  (no stage times: the gateway exports no mnemoflow_query_stage_seconds)"
    order = [stage for stage in drain if stage != "total"] + ["total"]
    lines = ["  where a query's time goes, mean ms (the gateway's mnemoflow_query_stage_seconds; stages may overlap):"]
    lines.append(f"  {'stage':<14}{'drain':>8}{'idle':>8}{'extra':>8}")
    for stage in order:
        d, i = drain.get(stage, 0.0), idle.get(stage, 0.0)
        lines.append(f"  {stage:<14}{d:8.1f}{i:8.1f}{d - i:+8.1f}")
    d, i = drain_ms - drain.get("total", 0.0), idle_ms - idle.get("total", 0.0)
    lines.append(f"  {'outside':<14}{d:8.1f}{i:8.1f}{d - i:+8.1f}")
    lines.append(f"  {'client':<14}{drain_ms:8.1f}{idle_ms:8.1f}{drain_ms - idle_ms:+8.1f}")
    return "\n".join(lines)


@dataclass
class Run:
    jobs: list[Job]
    started: float  # epoch of the first POST
    queryable_s: float  # first POST -> the last job's text found by a query
    settled_s: float  # first POST -> no vector left in the fresh tier
    cpu: dict[str, float]  # CPU seconds per process group from the first POST to queryable
    draining_ms: list[float]  # query latencies while the fresh tier drained into the index
    idle_ms: list[float]  # the same number after it settled
    stages: tuple[dict[str, float], dict[str, float]]  # the server's mean ms per stage of those queries: drain, idle
    burst_stages: dict[str, float]  # the same of the probe queries during the burst (the only queries then)
    chunks: list[tuple[str, float, float, dict[str, int]]]  # (job id, enqueued, done, result) per chunk, epochs
    merged_early: tuple[int, int]  # (vectors already merged into the index, all vectors) when every job was queryable


def _cpu_by_group(database_url: str) -> dict[str, float]:
    """CPU seconds so far of the stack's processes by what they are: this benchmark's children (gateway, worker,
    Valkey) and the embedded PostgreSQL (its postmaster is not our child), backends that exited included."""
    socket_dir = parse_qs(urlsplit(database_url).query).get("host", ["?"])[0]  # the embedded server's data dir
    groups: dict[str, float] = {}

    def add(name: str, proc: psutil.Process, reaped: bool = False) -> None:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            return
        extra = times.children_user + times.children_system if reaped else 0.0
        groups[name] = groups.get(name, 0.0) + times.user + times.system + extra

    for proc in psutil.Process().children(recursive=True):
        try:
            line = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if "services.gateway" in line:
            add("gateway", proc)
        elif "celery" in line or "workers" in line:
            add("worker", proc)
        elif "valkey" in line or "redis" in line:
            add("valkey", proc)
        elif "postgres" not in line:
            add("other", proc)
    for proc in psutil.process_iter(["name", "cmdline"]):
        line = " ".join(proc.info["cmdline"] or [])
        if proc.info["name"] == "postgres" and socket_dir in line:  # our postmaster (its children: "postgres: ...")
            add("postgres", proc, reaped=True)
            for child in proc.children():
                add("postgres", child)
    return groups


def ours(
    gateway: str, database_url: str, texts: list[str], request_size: int, *, settle: bool, queries: int, k: int
) -> Run:
    """POST /memory/batch with every text, following the jobs meanwhile; then, while the fresh tier drains into
    the index, queries back to back, and as many once it settled."""
    jobs: list[Job] = []
    posting = threading.Event()
    posting.set()
    errors: list[BaseException] = []
    poller = threading.Thread(target=_poll, args=(gateway, jobs, posting, 0.1, k, errors), daemon=True)
    cpu_before = _cpu_by_group(database_url)
    with httpx.Client(base_url=gateway, timeout=300) as client:
        burst_totals = _stage_totals(client)
        started = time.time()
        poller.start()
        try:
            for start in range(0, len(texts), request_size):
                share = texts[start : start + request_size]
                posted = time.time()
                response = client.post(
                    "/memory/batch", json={"items": [{"content": t} for t in share], "user_id": USER}
                )
                response.raise_for_status()
                jobs.append(Job(response.json()["job_id"], share[len(share) // 2], posted, time.time()))
        finally:
            posting.clear()
        poller.join()
        if errors:
            raise errors[0]
        queryable_s = max(j.found or j.seen for j in jobs) - started
        burst_stages = _stage_means(burst_totals, _stage_totals(client))
        cpu_after = _cpu_by_group(database_url)
        cpu = {name: cpu_after.get(name, 0.0) - cpu_before.get(name, 0.0) for name in cpu_after}
        with psycopg.connect(plain_dsn(database_url)) as conn:
            merged_early, vectors = conn.execute(
                "SELECT count(*) FILTER (WHERE indexed), count(*) FROM memory_vectors"
            ).fetchone()  # type: ignore[misc]
        drained = threading.Event()
        draining_ms: list[float] = []
        idle_ms: list[float] = []
        stages: tuple[dict[str, float], dict[str, float]] = ({}, {})
        with psycopg.connect(plain_dsn(database_url), autocommit=True) as conn:
            settled_s = queryable_s
            if settle:

                def watch() -> None:
                    with psycopg.connect(plain_dsn(database_url), autocommit=True) as watcher:
                        while _fresh_left(watcher):
                            time.sleep(0.1)
                    drained.set()

                watcher = threading.Thread(target=watch, daemon=True)
                watcher.start()
                if queries:
                    totals = _stage_totals(client)
                    draining_ms = _queries(client, texts, queries, k, drained)
                    stages = (_stage_means(totals, _stage_totals(client)), {})
                watcher.join()
                settled_s = time.time() - started
                if draining_ms:
                    _queries(client, texts, 20, k, None)  # warm as the draining ones were
                    totals = _stage_totals(client)
                    idle_ms = _queries(client, texts, len(draining_ms), k, None)
                    stages = (stages[0], _stage_means(totals, _stage_totals(client)))
            chunks = [
                (str(job_id), float(enqueued), float(done), result)
                for job_id, enqueued, done, result in conn.execute(
                    "SELECT job_id, extract(epoch FROM enqueued_at), extract(epoch FROM done_at), result "
                    "FROM job_chunks WHERE status = 'done'"
                ).fetchall()
            ]
    return Run(
        jobs,
        started,
        queryable_s,
        settled_s,
        cpu,
        draining_ms,
        idle_ms,
        stages,
        burst_stages,
        chunks,
        (merged_early, vectors),
    )


def batch_until_queryable(
    gateway: str, database_url: str, texts: list[str], request_size: int, *, settle: bool = True, user: str = USER
) -> tuple[float, float]:
    """The plain form of `ours`, for other benchmarks: seconds from the first POST /memory/batch (as `user`) until
    every job succeeded (stored and queryable),
    and until the background merge has indexed and linked everything (settled; with settle=False, not waited for:
    the queryable figure again)."""
    with httpx.Client(base_url=gateway, timeout=300) as client:
        started = time.perf_counter()
        jobs = []
        for start in range(0, len(texts), request_size):
            items = [{"content": t} for t in texts[start : start + request_size]]
            response = client.post("/memory/batch", json={"items": items, "user_id": user})
            response.raise_for_status()
            jobs.append(response.json()["job_id"])
        # One job polled at a time (in the order sent), so the polling itself costs the stack little.
        for job_id in jobs:
            while (job := client.get(f"/jobs/{job_id}", params={"user_id": user}).json())["status"] != "succeeded":
                if job["status"] == "failed":
                    raise RuntimeError(f"job failed: {job}")
                time.sleep(0.1)
        queryable = time.perf_counter() - started
        probe = texts[len(texts) // 2]
        found = client.post("/memory/query", json={"query": probe, "user_id": user, "k": 5}).json()["matches"]
        if not any(m["content"] == probe for m in found):
            print(f"  warning: probe memory not in top 5 for its own text: {probe!r}")
    if not settle:
        return queryable, queryable
    with psycopg.connect(plain_dsn(database_url), autocommit=True) as conn:
        while conn.execute("SELECT count(*) FROM memory_vectors WHERE NOT indexed").fetchone()[0]:  # type: ignore[index]
            time.sleep(0.5)
    return queryable, time.perf_counter() - started


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] if ordered else float("nan")


def report_split(run: Run, concurrency: int) -> None:
    """Where the time went: per job (latency, median and p95 over jobs) and in total (busy seconds)."""
    by_job: dict[str, list[tuple[float, float, dict[str, int]]]] = {}
    for job_id, enqueued, done, result in run.chunks:
        by_job.setdefault(job_id, []).append((enqueued, done, result))
    stages: dict[str, list[float]] = {
        name: []
        for name in (
            "POST: parse + plan",
            "POST: write chunks + send",
            "POST answered -> first chunk begun",
            "chunks worked (first start -> last done)",
            "last chunk done -> success seen",
            "success seen -> queryable",
            "POST sent -> queryable",
        )
    }
    busy = {"embed": 0.0, "COPY-store": 0.0, "other (claim, validate, complete)": 0.0}
    waits: list[float] = []
    for job in run.jobs:
        chunks = by_job.get(job.id, [])
        if not chunks:
            continue
        created = min(enqueued for enqueued, _, _ in chunks)  # the gateway's transaction: after parse + plan
        begun = [done - result.get("work_ms", 0) / 1000 for _, done, result in chunks]
        last_done = max(done for _, done, _ in chunks)
        stages["POST: parse + plan"].append(created - job.posted)
        stages["POST: write chunks + send"].append(job.answered - created)
        stages["POST answered -> first chunk begun"].append(min(begun) - job.answered)
        stages["chunks worked (first start -> last done)"].append(last_done - min(begun))
        stages["last chunk done -> success seen"].append(job.seen - last_done)
        stages["success seen -> queryable"].append((job.found or job.seen) - job.seen)
        stages["POST sent -> queryable"].append((job.found or job.seen) - job.posted)
        waits += [b - job.answered for b in begun]
        for _, _, result in chunks:
            embed, store, work = (result.get(key, 0) / 1000 for key in ("embed_ms", "store_ms", "work_ms"))
            busy["embed"] += embed
            busy["COPY-store"] += store
            busy["other (claim, validate, complete)"] += work - embed - store
    print("\n  per job (seconds; median, p95 and max over jobs; stages overlap across jobs; a chunk may begin before")
    print("  its POST's answer arrives: the messages go out before the response):")
    print(f"  {'stage':<44} {'p50':>7} {'p95':>7} {'max':>7}")
    for name, values in stages.items():
        print(f"  {name:<44} {_pct(values, 50):>7.2f} {_pct(values, 95):>7.2f} {max(values, default=0):>7.2f}")
    name = "POST answered -> chunk begun (every chunk)"
    print(f"  {name:<44} {_pct(waits, 50):>7.2f} {_pct(waits, 95):>7.2f} {max(waits):>7.2f}")
    wall = run.queryable_s
    posts = sum(j.answered - j.posted for j in run.jobs)
    parse = sum(stages["POST: parse + plan"])
    merge = run.settled_s - run.queryable_s
    worker = sum(busy.values())
    print(f"\n  in total, first POST -> every job queryable = {wall:.1f} s wall ({concurrency} worker processes):")
    rows = [
        ("gateway: parse + plan (POSTs, serial)", parse, wall),
        ("gateway: write chunks + send (POSTs)", posts - parse, wall),
        *((f"worker: {name}", seconds, wall * concurrency) for name, seconds in busy.items()),
        ("worker: idle or merging (slots x wall - chunks)", wall * concurrency - worker, wall * concurrency),
    ]
    print(f"  {'where':<44} {'seconds':>8} {'share':>7}  (of)")
    for name, seconds, of in rows:
        print(f"  {name:<44} {seconds:>8.1f} {seconds / of:>7.0%}  {'wall' if of == wall else 'worker slots'}")
    print(f"  {'merge into the index (queryable -> settled)':<44} {merge:>8.1f}          wall after queryable")
    early, vectors = run.merged_early
    print(f"  (the merge had indexed {early:,} of {vectors:,} vectors by the time every job was queryable)")
    cpu_total = sum(run.cpu.values()) or 1e-9
    print(f"\n  CPU seconds from the first POST to queryable, by process ({os.cpu_count()} cores x {wall:.1f} s):")
    for name, seconds in sorted(run.cpu.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<44} {seconds:>8.1f} {seconds / cpu_total:>7.0%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--request-size", type=int, default=5_000, help="items per POST /memory/batch")
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes")
    parser.add_argument(
        "--provider",
        default=os.environ.get("MNEMOFLOW_EMBEDDING_PROVIDER", "synthetic"),
        choices=["synthetic", "local", "static"],
        help="embedding provider of the workers and the baselines [synthetic, or $MNEMOFLOW_EMBEDDING_PROVIDER]",
    )
    parser.add_argument(
        "--queries",
        type=int,
        default=1000,
        help="at most this many queries while the fresh tier drains into the index, then as many idle [1000; 0: none]",
    )
    parser.add_argument("-k", type=int, default=5, help="k of every query (the plain client's) [5]")
    parser.add_argument("--no-settle", action="store_true", help="stop once every job is queryable")
    args = parser.parse_args()
    os.environ["MNEMOFLOW_EMBEDDING_PROVIDER"] = args.provider  # the stack's processes and bench_settings

    rows = []
    with servers() as srv:
        for size in args.sizes:
            texts = corpus(size)
            print(f"load average before n={size:,}: {_loadavg()}", flush=True)
            raw = raw_model_rate(args.provider, texts, args.concurrency)
            hnsw_s, _ = baseline_copy(fresh_database(srv.admin_url, "bench_baseline"), texts, indexed=True)
            plain_s, _ = baseline_copy(fresh_database(srv.admin_url, "bench_baseline"), texts, indexed=False)
            our_url = fresh_database(srv.admin_url, "bench_ingest")
            with stack(our_url, srv.redis_url, concurrency=args.concurrency) as gateway:
                print(f"load average before ours: {_loadavg()}", flush=True)
                run = ours(
                    gateway,
                    our_url,
                    texts,
                    args.request_size,
                    settle=not args.no_settle,
                    queries=args.queries,
                    k=args.k,
                )
            print(f"load average after: {_loadavg()}", flush=True)
            with psycopg.connect(plain_dsn(our_url)) as conn:
                stored = conn.execute("SELECT count(*) FROM memories").fetchone()[0]  # type: ignore[index]
                links = conn.execute("SELECT count(*) FROM waypoints").fetchone()[0]  # type: ignore[index]
            row = (size, size / hnsw_s, size / plain_s, raw, size / run.queryable_s, size / run.settled_s)
            rows.append(row)
            print(
                f"[ingest] n={size:,} {args.provider}: raw model {raw:,.0f}/s, COPY into HNSW {row[1]:,.0f}/s, "
                f"COPY unindexed {row[2]:,.0f}/s | ours queryable {row[4]:,.0f}/s ({row[4] / raw:.2f}x raw model, "
                f"{row[4] / row[2]:.2f}x unindexed COPY, {row[4] / row[1]:.2f}x HNSW COPY), settled "
                f"{row[5]:,.0f}/s ({row[5] / row[1]:.2f}x HNSW COPY) | stored {stored:,}, waypoints {links:,}",
                flush=True,
            )
            after = [(j.found or j.seen) - j.seen for j in run.jobs]
            missing = sum(1 for j in run.jobs if not j.found)
            print(
                f"  queryable after its job's success ({len(run.jobs)} jobs, seen by the poller -> its text in a "
                f"query's top {args.k}): p50 {_pct(after, 50):.3f} s, p95 {_pct(after, 95):.3f} s, max "
                f"{max(after):.3f} s (target <= 1 s); queries per job: max {max(j.tries for j in run.jobs)}"
                + (f"; NOT FOUND in 30 s: {missing}" if missing else "")
            )
            asked = [ms for j in run.jobs for ms in j.query_ms]
            if asked:
                burst = run.burst_stages
                print(
                    f"  those queries ({len(asked)}): p50 {_pct(asked, 50):.1f} ms, p95 {_pct(asked, 95):.1f}, max "
                    f"{max(asked):.1f}; the server's mean ms per stage: "
                    + ", ".join(f"{stage} {ms:.1f}" for stage, ms in burst.items())
                )
            report_split(run, args.concurrency)
            if args.queries and not args.no_settle:
                drain, idle = run.draining_ms, run.idle_ms
                note = (
                    ""
                    if len(drain) >= 500
                    else f" (the merge finished after only {len(drain)} queries: fewer than 500)"
                )
                if drain:
                    ratio = _pct(drain, 95) / _pct(idle, 95)
                    print(
                        f"\n  query p95 while the fresh tier drains: {_pct(drain, 95):.1f} ms, {len(drain)} queries "
                        f"(p50 {_pct(drain, 50):.1f}); idle after it settled: {_pct(idle, 95):.1f} ms over {len(idle)} "
                        f"(p50 {_pct(idle, 50):.1f}); ratio {ratio:.2f}x (target <= 2x){note}"
                    )
                    print(stage_table(run.stages, statistics.fmean(drain), statistics.fmean(idle)))
                else:
                    print("\n  query p95 while the fresh tier drains: none (it had drained before the first query)")

    print(f"\nbulk ingest through POST /memory/batch, {args.provider} embeddings, {args.concurrency} worker processes")
    print("  raw model = the provider alone in as many processes; queryable = every job succeeded and a query found")
    print("  one of its texts (fresh tier, searched without the index); settled = merged into HNSW + linked (with")
    print("  the drain phase's queries running). Rates in memories/s.")
    header = (
        "n",
        "raw model",
        "COPY→HNSW",
        "COPY plain",
        "queryable",
        "settled",
        "q/raw",
        "q/plain",
        "q/HNSW",
        "s/HNSW",
    )
    print("{:>9} {:>10} {:>10} {:>11} {:>10} {:>9} {:>7} {:>8} {:>7} {:>7}".format(*header))
    for size, hnsw, plain, raw, queryable, settled in rows:
        print(
            f"{size:>9,} {raw:>10,.0f} {hnsw:>10,.0f} {plain:>11,.0f} {queryable:>10,.0f} {settled:>9,.0f} "
            f"{queryable / raw:>7.2f} {queryable / plain:>8.2f} {queryable / hnsw:>7.2f} {settled / hnsw:>7.2f}"
        )
    target = "q/plain >= 0.70 (synthetic)" if args.provider == "synthetic" else "q/raw >= 0.90 (the model)"
    print(f"  headline: {target}")


def _loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


if __name__ == "__main__":
    main()
