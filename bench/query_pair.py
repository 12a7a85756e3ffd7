"""Query latency of several commits side by side: a gateway of each on one store, asked in turn, question by question.

On a machine shared with other work, two runs of `bench.query` one after the other measure two different loads.
Here each commit's gateway (`git archive` of it in a temporary directory, run with this checkout's environment)
serves the same store beside the others, with one worker; each question goes to every gateway in turn (the order
rotating) and to the bare HNSW query, so what the load does in a given second it does to all of them. The query
embedding cache is off (the gateways share Redis): every query calls the model, as a new question does.

    python -m bench.query_pair --size 100000 --commits 62bdcd4 HEAD
    python -m bench.query_pair --database-url postgresql+psycopg://…/bench_query --size 100000 --commits A B

`--database-url`: a store already loaded by `bench.query` with the same `--size` (its corpus), asked as it is.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import psycopg
from pgvector.psycopg import register_vector

from bench.common import ROOT, bench_settings, corpus, fresh_database, percentiles, plain_dsn, servers, wait_settled
from bench.query import USER, bare_query, load, questions
from infra.embedded import free_port
from infra.processes import gateway_command, wait_for_worker, wait_healthy, worker_command
from shared.config import Settings
from shared.embedding.factory import create_embedder


def checkout(commit: str, into: Path) -> Path:
    """The tree of `commit` written to `into` (nothing of this checkout changes)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


@contextmanager
def gateways(trees: dict[str, Path], database_url: str, redis_url: str, logs: Path) -> Iterator[dict[str, str]]:
    """A gateway of each tree and one worker (the first tree's), on the same store; their URLs by name."""
    env = dict(
        os.environ,
        DATABASE_URL=database_url,
        REDIS_URL=redis_url,
        MNEMOFLOW_ENVIRONMENT="development",
        MNEMOFLOW_LOG_LEVEL="WARNING",
    )
    env.setdefault("MNEMOFLOW_EMBEDDING_PROVIDER", "synthetic")
    # The gateways share Redis: with the query-embedding cache the second asked would find the first's vector.
    env["MNEMOFLOW_QUERY_EMBEDDING_CACHE_TTL_SECONDS"] = "0"
    worker_name = f"pair-{free_port()}"
    first = next(iter(trees.values()))
    procs = []
    try:
        command = worker_command(concurrency=2, name=worker_name, log_level="WARNING", quiet_startup=True)
        worker_log = open(logs / "worker.log", "wb")  # noqa: SIM115
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", *command], env=env, cwd=first, stdout=worker_log, stderr=subprocess.STDOUT
            )
        )
        urls = {}
        for name, tree in trees.items():
            port = free_port()
            log = open(logs / f"gateway-{name}.log", "wb")  # noqa: SIM115
            command = gateway_command(host="127.0.0.1", port=port, log_level="warning")
            gateway = subprocess.Popen(
                [sys.executable, "-m", *command], env=env, cwd=tree, stdout=log, stderr=subprocess.STDOUT
            )
            procs.append(gateway)
            urls[name] = f"http://127.0.0.1:{port}"
            wait_healthy(urls[name], gateway, log_path=logs / f"gateway-{name}.log")
        settings = Settings(database_url=database_url, redis_url=redis_url)
        wait_for_worker(settings, worker_name, procs[0], log_path=logs / "worker.log")
        wait_settled(procs)
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def ask_in_turn(urls: dict[str, str], database_url: str, qs: list[str], k: int) -> None:
    settings = bench_settings(database_url)
    embedder = create_embedder(settings)
    names = list(urls)
    wall: dict[str, list[float]] = {name: [] for name in names}
    stages: dict[str, dict[str, list[float]]] = {name: {} for name in names}
    hnsw, model = [], []
    with psycopg.connect(plain_dsn(database_url), autocommit=True) as conn, httpx.Client(timeout=30) as client:
        register_vector(conn)
        conn.execute(f"SET hnsw.ef_search = {settings.hnsw_ef_search}")
        for q in qs[:20]:  # warm-up
            for name in names:
                client.post(f"{urls[name]}/memory/query", json={"query": q, "k": k, "user_id": USER})
        for i, q in enumerate(qs):
            embedding_ms, hnsw_ms = bare_query(conn, embedder, q, k)
            model.append(embedding_ms)
            hnsw.append(hnsw_ms)
            for name in names[i % len(names) :] + names[: i % len(names)]:
                started = time.perf_counter()
                body = {"query": q, "k": k, "user_id": USER, "explain": True}
                response = client.post(f"{urls[name]}/memory/query", json=body)
                ms = (time.perf_counter() - started) * 1000
                response.raise_for_status()
                wall[name].append(ms)
                timings = response.json()["timings_ms"]
                server = timings.pop("total")
                for stage, value in (timings | {"server": server, "outside": ms - server}).items():
                    stages[name].setdefault(stage, []).append(value)
    base, own = percentiles(hnsw), percentiles(model)
    print(
        f"bare HNSW p50 {base['p50']:.1f} p95 {base['p95']:.1f} ms | the model alone p50 {own['p50']:.1f} "
        f"p95 {own['p95']:.1f} ms",
        flush=True,
    )
    for name in names:
        ours = percentiles(wall[name])
        print(
            "  per stage (server side, ms): "
            + ", ".join(
                f"{stage} p50 {percentiles(v)['p50']:.1f} p95 {percentiles(v)['p95']:.1f}"
                for stage, v in stages[name].items()
            )
        )
        print(
            f"[{name}] ours p50 {ours['p50']:.1f} p95 {ours['p95']:.1f} p99 {ours['p99']:.1f} ms | p95 / HNSW p95 "
            f"{ours['p95'] / base['p95']:.1f}, p50 / HNSW p50 {ours['p50'] / base['p50']:.1f}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("-k", type=int, default=8)
    parser.add_argument("--commits", nargs="+", required=True)
    parser.add_argument("--database-url", help="a store bench.query loaded with this --size, asked as it is")
    args = parser.parse_args()
    texts = corpus(args.size)
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="mnemoflow-pair-") as tmp:
        srv = stack.enter_context(servers())
        url = args.database_url
        if url is None:
            url = fresh_database(srv.admin_url, "bench_query_pair")
            print(f"  loaded {args.size:,} in {load(url, texts):.0f} s", flush=True)
        trees = {commit: checkout(commit, Path(tmp) / f"tree-{i}") for i, commit in enumerate(args.commits)}
        print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(), flush=True)
        with gateways(trees, url, srv.redis_url, Path(tmp)) as urls:
            ask_in_turn(urls, url, questions(texts, args.queries), args.k)
        print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(), flush=True)


if __name__ == "__main__":
    main()
