"""Bulk load from the CLI: `mnemoflow batch FILE.jsonl` against the batch route's own rate, back to back.

Both load the same corpus into a fresh database behind the same kind of stack (a gateway and one worker on every
queue, `--concurrency` processes): first the route as `bench.ingest` drives it (POSTs of 5,000 items, then each
job polled in turn), then the CLI as a user runs it (the file checked, then batches of `--batch-size`, several in
flight, followed by one progress bar). Rates are items per second until every job has succeeded; the CLI's is
given with and without its first pass over the file. The load average is printed before and after each, since the
machine may be shared.

    python -m bench.cli_batch --size 100000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import corpus, fresh_database, servers, stack
from bench.ingest import ours

CLI_USER = "bench-cli"  # not bench.ingest's tenant: each has a write quota of its own (a full bucket each)


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def cli_load(gateway: str, path: Path, batch_size: int, parallel: int) -> tuple[float, str]:
    """Seconds `mnemoflow batch` took (all of it: the check, the sending, the waiting), and what it printed last."""
    command = [
        sys.executable,
        "-m",
        "services.cli.main",
        "batch",
        str(path),
        "--user-id",
        CLI_USER,
        "--batch-size",
        str(batch_size),
        "--parallel",
        str(parallel),
    ]
    started = time.perf_counter()
    done = subprocess.run(command, env=dict(os.environ, MNEMOFLOW_URL=gateway), capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"mnemoflow batch failed: {done.stdout}{done.stderr}")
    return seconds, done.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=1000, help="the CLI's items per request [its default]")
    parser.add_argument("--parallel", type=int, default=4, help="the CLI's requests in flight [its default]")
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes")
    parser.add_argument("--cli-first", action="store_true", help="run the CLI first, then the route")
    args = parser.parse_args()
    os.environ.setdefault("MNEMOFLOW_EMBEDDING_PROVIDER", "synthetic")
    texts = corpus(args.size)
    with tempfile.TemporaryDirectory(prefix="mnemoflow-cli-batch-") as tmp, servers() as srv:
        path = Path(tmp) / "corpus.jsonl"
        path.write_text("".join(json.dumps({"content": text}) + "\n" for text in texts))

        def route() -> float:
            print(f"load average before the route: {load_average()}", flush=True)
            url = fresh_database(srv.admin_url, "bench_route")
            with stack(url, srv.redis_url, concurrency=args.concurrency) as gateway:
                seconds, _ = ours(gateway, url, texts, 5_000, settle=False)
            rate = args.size / seconds
            print(f"[route] POST /memory/batch: {args.size:,} in {seconds:.1f} s, {rate:,.0f}/s", flush=True)
            return seconds

        def cli() -> float:
            print(f"load average before the CLI: {load_average()}", flush=True)
            url = fresh_database(srv.admin_url, "bench_cli")
            with stack(url, srv.redis_url, concurrency=args.concurrency) as gateway:
                seconds, said = cli_load(gateway, path, args.batch_size, args.parallel)
            rate = args.size / seconds
            print(f"[cli]   mnemoflow batch: {args.size:,} in {seconds:.1f} s, {rate:,.0f}/s (all of it)")
            print(f"        it said: {said}", flush=True)
            return seconds

        if args.cli_first:
            cli_s = cli()
            route_s = route()
        else:
            route_s = route()
            cli_s = cli()
        print(f"load average after: {load_average()}")
        print(f"cli/route: {route_s / cli_s:.2f}x")


if __name__ == "__main__":
    main()
