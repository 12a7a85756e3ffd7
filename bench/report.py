"""Regenerate docs/benchmarks.md: run the benchmarks and write what they print, with the method, under one date.

    python -m bench.report                   # quality, query latency, ingest, embeddings, decay, documents
    python -m bench.report --only quality query  # rewrites those sections, keeps the others
    python -m bench.report --large           # the query latency at 1M memories too (25-45 min more to load)

Each benchmark runs as its own process on its own private stack (or on DATABASE_URL / REDIS_URL) and prints its
figures beside a baseline measured in the same run; this command records that output verbatim, so the page says
exactly what the benchmarks measured. It is not part of CI (about 40 minutes here).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "benchmarks.md"


@dataclass(frozen=True)
class Benchmark:
    name: str
    title: str
    args: tuple[str, ...]
    method: str


BENCHMARKS = (
    Benchmark(
        "quality",
        "Retrieval quality",
        ("bench.quality", "--datasets", "locomo", "--modes", "fulltext,dense,hybrid", "--gate-sweep"),
        "LoCoMo (turn-level Recall@5/@10 per question) through `POST /memory/query` on a private stack with the"
        " default local model, k = 10, at the shipped defaults, stored by a native client (each session a"
        " `sequence` batch with its time as `occurred_at`). `used` is the product's"
        " figure: every question scored once, on a copy of the store the other half of the questions used first"
        " (reinforcement on, applied); `fresh` asks read-only on an unused copy. Baselines in the same run: full"
        " text alone, vectors alone and both fused by RRF (read-only). Blindness: questions that return nothing;"
        " off-store injection: questions asked in another conversation's store that return anything; the gate"
        " sweep: both for a range of `min_score`.",
    ),
    Benchmark(
        "quality-scifact",
        "Retrieval quality, SciFact",
        ("bench.quality", "--datasets", "scifact"),
        'As above on SciFact (nDCG@10, Recall@10; one store of "title. abstract" memories in batches); off-store'
        " injection asks its claims in a LoCoMo conversation's store.",
    ),
    Benchmark(
        "quality-plain",
        "Retrieval quality, plain clients",
        ("bench.quality", "--datasets", "locomo", "--client", "plain"),
        "As above, with every LoCoMo turn added one by one through `POST /memory/add` with only `content` and"
        " `metadata: {session_id, timestamp}`, as OpenMemory's and mem0's clients send it.",
    ),
    Benchmark(
        "quality-session",
        "Retrieval quality, plain clients without time",
        ("bench.quality", "--datasets", "locomo", "--client", "session"),
        "As above, with `metadata: {session_id}` alone.",
    ),
    Benchmark(
        "quality-batch",
        "Retrieval quality, a plain batch",
        ("bench.quality", "--datasets", "locomo", "--client", "batch"),
        "Every turn of a conversation in one `POST /memory/batch` with no `sequence`, no time and no conversation"
        " key: nothing links the turns.",
    ),
    Benchmark(
        "quality-scifact-one-by-one",
        "Retrieval quality, SciFact added one by one",
        ("bench.quality", "--datasets", "scifact", "--client", "plain", "--no-usage"),
        "SciFact's abstracts added one at a time through `POST /memory/add` (content only), one copy, asked"
        " read-only: loading two copies one by one takes long, and used scores as fresh on the batch-loaded store.",
    ),
    Benchmark(
        "tune",
        "Knobs chosen leaving one conversation out",
        ("bench.tune",),
        "Each read-path knob picked on four LoCoMo conversations (SciFact: four folds of its claims) and scored on"
        " the fifth, in-process, read-only; the held-out scores put together, per category, against the shipped"
        " defaults on the same questions.",
    ),
    Benchmark(
        "aging",
        "Recall after time passes",
        ("bench.aging",),
        "LoCoMo asked after 30 and 90 simulated days of the product's daily decay cycle (3 % of each sector a day:"
        " tiers, decay, compression, fingerprints), every question at the defaults with reinforcement and"
        " regeneration on, beside the fresh store.",
    ),
    Benchmark(
        "query",
        "Query latency",
        ("bench.query", "--sizes", "10000", "100000"),
        "`POST /memory/query` over HTTP (k = 8, one client) on a store of synthetic memories: p50/p95/p99 as a plain"
        " client asks, and the server's time per stage from each question asked again with `explain: true`."
        " Baseline in the same run and database: the bare HNSW top-32 SQL query on the one graph of every sector's"
        " vectors, the floor any pipeline stands on.",
    ),
    Benchmark(
        "query-1m",
        "Query latency at one million memories",
        ("bench.query", "--sizes", "1000000", "--queries", "300"),
        "As above, on a bulk-loaded store of one million memories (run with `--large`).",
    ),
    Benchmark(
        "ingest",
        "Bulk ingest",
        ("bench.ingest", "--sizes", "100000"),
        "`POST /memory/batch` (5,000 items a request) until every job succeeded, each job's text queried as soon as"
        " it did; then queries while the fresh tier drains into HNSW, and as many once it settled. Synthetic"
        " embeddings. Baselines in the same run: the provider alone, a plain COPY of the same rows into the"
        " HNSW-indexed tables, and unindexed; the split of a job's time from the job record, CPU by process.",
    ),
    Benchmark(
        "cli-batch",
        "Bulk load from the CLI",
        ("bench.cli_batch", "--size", "100000"),
        "`mnemoflow batch corpus.jsonl` (its defaults: batches of 1,000, 4 in flight, one progress bar) beside the"
        " batch route as `bench.ingest` drives it (POSTs of 5,000, each job polled in turn), back to back on the"
        " same corpus, each into a fresh database behind a fresh stack, synthetic embeddings; both until every job"
        " has succeeded (queryable). The CLI's time includes its first pass over the file (every record checked);"
        " the line it printed gives its rate from the first batch sent. The load average is printed before each,"
        " since the machine may be shared.",
    ),
    Benchmark(
        "embeddings",
        "Embedding providers",
        ("bench.embeddings",),
        "Each provider's raw rate (sentences/s, batched) and single-sentence latency, and in context (a turn"
        " embedded after the two before it) against its own rate.",
    ),
    Benchmark(
        "decay",
        "Decay",
        ("bench.decay", "--size", "100000", "--storage-size", "5000"),
        "A full decay cycle (ratio 1.0) in memories/s against a plain set-based `UPDATE` of every row, and the"
        " storage a memory takes when full, compressed and fingerprinted.",
    ),
    Benchmark(
        "documents",
        "Document ingestion",
        ("bench.ingest_docs", "--documents", "200", "--audio", "3"),
        "Each format (PDF, DOCX, HTML, Markdown, text, speech) uploaded through the gateway until every document is"
        " done, one format after another, with synthetic embeddings, beside the format's own library on the same"
        " files in the same run (pypdfium2, trafilatura, python-docx, reading the file, faster-whisper); the"
        " worker's stage times and CPU by process per document.",
    ),
    Benchmark(
        "isolation",
        "Reads beside writes",
        ("bench.isolation",),
        "A settled tenant of 100,000 memories queried by 3 clients idle and while another tenant writes a"
        " 100,000-memory batch and 200 documents, three rounds, and the writes' rates with and without the queries;"
        " synthetic embeddings, default settings.",
    ),
    Benchmark(
        "costly",
        "Costly inputs",
        ("bench.costly_inputs",),
        "One tenant's long-token texts against a gateway running the default local model: an add of 99,000 `>`, a"
        " query of 16,000 `!`, and a burst of 45 concurrent adds of 3,000 `!` with a conversation in their metadata,"
        " while another tenant lists its memories and an anonymous probe checks `/health`. The baseline in the same"
        " run is the gateway with the token limits lifted and its embedding gate opened (64 at once, a queue of"
        " 1,000). RSS: the gateway process, before, at its most during the burst, and after.",
    ),
    Benchmark(
        "fairness",
        "Fairness between tenants",
        ("bench.fairness",),
        "A quiet tenant's 10-item batch (`POST /memory/batch` to its job succeeded; the best of 3 idle) on a stack of"
        " one worker process with the default local model: idle, then once a noisy tenant's 3 Markdown documents of"
        " 32 KB (sections of prose and tables) are parsed and their first chunk is stored. The baseline in the same"
        " run is the same stack with fair queues off (`MNEMOFLOW_FAIR_QUEUES=0`: every message at one priority, first"
        " come first served). Then a 26-minute silent WAV: decoded and given whole to tiny.en as the parser did"
        " before, decoded and its silence found as it does now (both in the benchmark's process), and the ingest"
        " path's `extract` (its sandboxed child included).",
    ),
    Benchmark(
        "seal",
        "Signed tasks and sealed cache entries",
        ("bench.seal",),
        "What the broker's protections (docs/security.md#the-broker) add per operation, in one process: sealing"
        " and opening a hot row's cached payload (~580 bytes) and a query embedding (384 floats), signing and"
        " verifying a chunk's task message, each beside the work the same path does anyway (the JSON encoding or"
        " decoding, the vector's bytes) measured in the same run. A query costs 15-30 ms and reads a few entries.",
    ),
    Benchmark(
        "updates",
        "Facts that change",
        ("bench.updates", "--verbose"),
        "The updates-dev protocol (`../shared/data/updates-dev`, bench/updates.py): per case a tenant of 32 turns"
        " added one by one as a plain client (`content`, `session_id`, `timestamp`), a fact and 60 days later the"
        " fact that replaces it, then the question at the defaults (k = 5, reinforcement on) and one off-topic"
        " question.",
    ),
    Benchmark(
        "clients",
        "Many clients",
        ("bench.clients",),
        "Adds per second and query latency with 1, 8 and 32 concurrent clients, each a tenant of its own sending"
        " what OpenMemory's client sends (`content` + `user_id` to /memory/add; `query`, `k` = 5 and `user_id` to"
        " /memory/query), back to back for 20 s a phase after every tenant was given 30 memories by batch. Default"
        " settings: the local model, reinforcement on. The baseline in the same run is the gateway as one process;"
        " then the default count (`MNEMOFLOW_GATEWAY_WORKERS` unset: one per two cores, 1 to 4), each on a fresh"
        " stack. 5xx are counted; RSS is each gateway process's resident memory at the end. The load average is"
        " printed before and after, since the machine may be shared.",
    ),
)


def run(benchmark: Benchmark) -> tuple[str, float, int]:
    """The benchmark's standard output, its wall time in seconds and its exit code (its stderr goes to ours)."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", *benchmark.args], cwd=ROOT, stdout=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    return done.stdout.strip(), time.monotonic() - started, done.returncode


HEADER = (
    "# Benchmarks\n\n"
    "Written by `make bench-report` (`python -m bench.report`); each section says when and on what it was measured."
    " Each section is what the benchmark printed, as it printed it; the figures beside ours are baselines measured"
    " in the same run. Not part of CI.\n\n"
    "Where a figure comes from: every benchmark starts a private stack of its own (embedded PostgreSQL with"
    " pgvector and Valkey, the gateway, one worker of two processes), so the client, the gateway, the worker and"
    " PostgreSQL share the machine's cores. The history of what was tried is in [experiments.md](experiments.md).\n"
)


def section(benchmark: Benchmark, output: str, seconds: float, code: int, measured: datetime) -> str:
    command = "python -m " + " ".join(benchmark.args)
    where = f"{measured:%Y-%m-%d}, {platform.system()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    took = "" if math.isnan(seconds) else f"{seconds / 60:.0f} min; "
    lines = [f"## {benchmark.title}", "", benchmark.method, "", f"`{command}` ({took}{where})"]
    if code != 0:
        lines += ["", f"**The benchmark failed (exit code {code}); what it printed before that:**"]
    lines += ["", "```", output or "(no output)", "```"]
    return "\n".join(lines) + "\n"


def page(sections: dict[str, str], previous: str) -> str:
    """The page with `sections` (title -> text) new and every other section kept as `previous` had it."""
    kept = {
        part.split("\n", 1)[0].strip(): "## " + part
        for part in previous.split("\n## ")[1:]  # the text before the first section is the header
    }
    kept |= sections
    ordered = [kept[b.title] for b in BENCHMARKS if b.title in kept]
    # Sections written by hand (the fault tests' figures) follow, as they were: a rewrite must not drop them.
    known = {b.title for b in BENCHMARKS}
    ordered += [text for title, text in kept.items() if title not in known]
    return HEADER + "".join("\n" + text.rstrip("\n") + "\n" for text in ordered)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.report", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    names = [b.name for b in BENCHMARKS]
    parser.add_argument("--only", nargs="+", choices=names, help="run only these benchmarks")
    parser.add_argument("--large", action="store_true", help="include the query latency at one million memories")
    parser.add_argument("--output", type=Path, default=PAGE, help=f"where to write [{PAGE.relative_to(ROOT)}]")
    parser.add_argument(
        "--saved",
        nargs="+",
        default=[],
        metavar="NAME=FILE",
        help="take these benchmarks' sections from what their exact command printed into FILE earlier (dated by"
        " the file) instead of running them again",
    )
    args = parser.parse_args()
    chosen = [
        b
        for b in BENCHMARKS
        if (args.only and b.name in args.only) or (not args.only and (b.name != "query-1m" or args.large))
    ]
    sections, failed = {}, False
    saved = dict(entry.split("=", 1) for entry in args.saved)
    for benchmark in [b for b in BENCHMARKS if b.name in saved]:
        path = Path(saved.pop(benchmark.name))
        measured = datetime.fromtimestamp(path.stat().st_mtime, UTC)
        output = "\n".join(
            line for line in path.read_text().splitlines() if "Warning" not in line and "Path(" not in line
        )
        sections[benchmark.title] = section(benchmark, output.strip(), math.nan, 0, measured)
        chosen = [b for b in chosen if b is not benchmark]
    if saved:
        parser.error(f"unknown benchmark(s) in --saved: {', '.join(saved)}; choose from {', '.join(names)}")
    for benchmark in chosen:
        print(f"[report] {benchmark.title}: python -m {' '.join(benchmark.args)}", flush=True)
        measured = datetime.now(UTC)
        output, seconds, code = run(benchmark)
        print(f"[report] {benchmark.title}: {seconds / 60:.1f} min, exit code {code}", flush=True)
        sections[benchmark.title] = section(benchmark, output, seconds, code, measured)
        failed |= code != 0
    previous = args.output.read_text() if args.output.exists() else ""
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(page(sections, previous))
    print(f"[report] wrote {args.output}")
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
