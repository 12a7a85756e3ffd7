"""Document ingestion end to end, per format, beside each format's raw parser on the same files, in the same run.

Each document goes gateway (sniff, stage in PostgreSQL) → ingest worker (read, sandboxed extract, chunk,
classify, plan; small uploads claimed several at a time and parsed in one child) → embed.<sector> workers (embed,
store) → finished with reading-order links. The formats run one after another on one stack: a format's
end-to-end rate is its documents over the wall time from its first upload until every one of them is done.

The raw baseline is the format's own library on the same files, in as many processes as the worker has
(`--concurrency`), nothing else running: PDF pypdfium2 text per page; HTML trafilatura; DOCX python-docx
(paragraphs and tables); text and Markdown reading and decoding the file; audio faster-whisper on the same clip
with the model loaded once. end-to-end / raw is what everything around the parser costs.

The document floor, measured in the same run into a database of the same schema: the same files sniffed and parsed
by the worker's sandbox (small ones in the worker's groups), chunked and classified in process, embedded by the
stack's model, and their rows (documents, memories, vectors) written by one COPY per table, in `--concurrency`
processes. end-to-end / floor is what the pipeline's hand-overs cost (issue 49's target: >= 0.5).
"extract" is the worker's extract stage per document (sniff + the sandboxed child + the parse); minus the
raw parse, it is the sandbox's overhead per document in the pipeline.

Before the formats, on the stack just started (as soon as /health says ready, not waited quiet), one document of
each format after another, each timed from its upload until it is done: the first document after a start against
the median of the others (target: within 2x).

    python -m bench.ingest_docs                          # 200 documents + 3 speech clips, synthetic embeddings
    python -m bench.ingest_docs --documents 1000 --provider local
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg

from bench.common import (
    ROOT,
    SUBJECTS,
    VERBS,
    CpuMeter,
    corpus,
    fresh_database,
    plain_dsn,
    servers,
    stack,
    wait_settled,
)

USER = "bench"
STAGES = ("read_ms", "extract_ms", "chunk_ms", "classify_ms", "embed_ms", "store_ms")
# Share of the corpus per format (audio is a few clips: transcription costs seconds per clip).
MIX = {"pdf": 0.3, "docx": 0.2, "html": 0.2, "md": 0.15, "txt": 0.15}


def _paragraphs(rng: random.Random, sentences: list[str], count: int) -> list[str]:
    return [" ".join(rng.sample(sentences, 6)) for _ in range(count)]


def make_document(fmt: str, number: int, root: Path, rng: random.Random, sentences: list[str]) -> Path:
    """A small-to-medium document of `fmt` whose text is unique to `number`."""
    from tests.unit.ingest import samples  # the generators' libraries are dev dependencies

    title = f"Report {number}: {rng.choice(SUBJECTS)} {rng.choice(VERBS)} things"
    paragraphs = _paragraphs(rng, sentences, rng.randint(4, 40))
    path = root / f"doc{number}.{fmt}"
    if fmt == "pdf":
        from fpdf import FPDF

        pdf = FPDF()
        pdf.set_font("helvetica", size=11)
        for start in range(0, len(paragraphs), 6):  # ~6 paragraphs a page
            pdf.add_page()
            for paragraph in paragraphs[start : start + 6]:
                pdf.multi_cell(0, 6, paragraph, new_x="LMARGIN", new_y="NEXT")
        pdf.output(str(path))
    elif fmt == "docx":
        import docx

        document = docx.Document()
        document.add_heading(title, level=1)
        for n, paragraph in enumerate(paragraphs):
            if n % 5 == 0:
                document.add_heading(f"Part {n // 5 + 1}", level=2)
            document.add_paragraph(paragraph)
        document.save(str(path))
    elif fmt == "html":
        body = "".join(f"<h2>Part {n}</h2><p>{p}</p>" for n, p in enumerate(paragraphs))
        head = f"<!DOCTYPE html><html><head><title>{title}</title></head>"
        path.write_text(f"{head}<body><article><h1>{title}</h1>{body}</article></body></html>")
    elif fmt == "md":
        path.write_text(f"# {title}\n\n" + "\n\n".join(f"## Part {n}\n\n{p}" for n, p in enumerate(paragraphs)))
    elif fmt == "txt":
        path.write_text(title + "\n\n" + "\n\n".join(paragraphs))
    elif fmt == "wav":
        samples.speech_wav(path, f"Voice note {number}. " + samples.TALK)
    return path


def build(root: Path, documents: int, audio: int) -> list[tuple[str, Path]]:
    rng = random.Random(11)
    sentences = corpus(5000)
    formats = [fmt for fmt, share in MIX.items() for _ in range(round(share * documents))][:documents]
    formats += ["txt"] * (documents - len(formats)) + ["wav"] * audio
    rng.shuffle(formats)
    return [(fmt, make_document(fmt, n, root, rng, sentences)) for n, fmt in enumerate(formats)]


def upload(client: httpx.Client, path: Path, user: str = USER) -> str:
    """Upload as a client does: on a 429 (the tenant's ingest rate limit), wait as told and send it again."""
    while True:
        with open(path, "rb") as handle:
            response = client.post("/memory/ingest/file", files={"file": (path.name, handle)}, data={"user_id": user})
        if response.status_code != 429:
            break
        time.sleep(float(response.headers.get("retry-after", "1")))
    response.raise_for_status()
    return str(response.json()["document_id"])


def wait_until_ingested(dsn: str, expected: int, progress: Callable[[dict[str, int]], None]) -> None:
    while True:
        with psycopg.connect(dsn) as conn:
            counts = dict(conn.execute("SELECT status, count(*) FROM documents GROUP BY status").fetchall())
        progress(counts)
        if counts.get("done", 0) + counts.get("failed", 0) + counts.get("duplicate", 0) >= expected:
            return
        time.sleep(1.0)


def first_documents(gateway: str, dsn: str, by_format: dict[str, list[Path]], rounds: int = 3) -> list[float]:
    """Seconds from upload to done of single documents sent one after another (`rounds` of each format, a tenant
    of their own), the first of them the stack's first document after its start."""
    seconds = []
    with httpx.Client(base_url=gateway, timeout=120) as client, psycopg.connect(dsn, autocommit=True) as conn:
        while client.get("/health").status_code != 200:  # as a client or a load balancer waits for the stack
            time.sleep(0.1)
        for round_ in range(rounds):
            for paths in (ps for _, ps in sorted(by_format.items())):
                started = time.perf_counter()
                document = upload(client, paths[round_ % len(paths)], f"{USER}-first")
                while True:
                    row = conn.execute("SELECT status FROM documents WHERE id = %s", (document,)).fetchone()
                    if row and row[0] in ("done", "failed", "duplicate"):
                        break
                    time.sleep(0.01)
                seconds.append(time.perf_counter() - started)
    first, rest = seconds[0], sorted(seconds[1:])
    median = rest[len(rest) // 2] if rest else first
    print(
        f"first document after a start: {first * 1000:.0f} ms; the next {len(rest)} (one at a time): median "
        f"{median * 1000:.0f} ms, max {max(rest or [first]) * 1000:.0f} ms; first / median {first / median:.2f}"
    )
    return seconds


def raw_parse(fmt: str, path: str) -> int:
    """The format's own library on one file, as a user would call it; the characters it read."""
    if fmt == "pdf":
        import pypdfium2 as pdfium

        pdf = pdfium.PdfDocument(path)
        try:
            return sum(len(pdf[i].get_textpage().get_text_bounded()) for i in range(len(pdf)))
        finally:
            pdf.close()
    if fmt == "html":
        import trafilatura

        with open(path, "rb") as handle:
            return len(trafilatura.extract(handle.read()) or "")
    if fmt == "docx":
        import docx

        document = docx.Document(path)
        cells = (cell.text for table in document.tables for row in table.rows for cell in row.cells)
        return sum(len(p.text) for p in document.paragraphs) + sum(len(c) for c in cells)
    if fmt in ("txt", "md"):
        with open(path, "rb") as handle:
            return len(handle.read().decode("utf-8"))
    if fmt == "wav":  # the worker's model and decoding settings (shared/ingest/audio.py)
        segments, _ = _whisper().transcribe(
            path, language="en", beam_size=1, vad_filter=False, condition_on_previous_text=False
        )
        return sum(len(segment.text) for segment in segments)
    raise ValueError(fmt)


_MODEL: list[Any] = []


def _whisper() -> Any:
    if not _MODEL:
        from faster_whisper import WhisperModel

        from shared.ingest.audio import model_dir

        _MODEL.append(WhisperModel(str(model_dir()), device="cpu", compute_type="int8", cpu_threads=2))
    return _MODEL[0]


def _raw_share(args: tuple[str, list[str]]) -> float:
    fmt, paths = args
    if fmt == "wav":
        _whisper()  # the model loaded once, before the clock
    raw_parse(fmt, paths[0])  # imports and first-call costs, before the clock
    started = time.perf_counter()
    for path in paths:
        raw_parse(fmt, path)
    return time.perf_counter() - started


def raw_rate(fmt: str, paths: list[Path], processes: int) -> float:
    """Documents/s of the raw library over `paths` in `processes` processes (the worker's), files split evenly."""
    shares = [(fmt, [str(p) for p in paths[i::processes]]) for i in range(processes) if paths[i::processes]]
    with multiprocessing.get_context("spawn").Pool(len(shares)) as pool:
        seconds = pool.map(_raw_share, shares)
    return len(paths) / max(seconds)


def document_floor(database_url: str, fmt: str, paths: list[Path], processes: int) -> float:
    """Documents/s of the floor (bench/docs_floor.py) over `paths` in `processes` processes, files split evenly.

    Each share runs as `python -m bench.docs_floor`: the sandbox's children import their parent's main module, and a
    light one keeps each child's start what the worker's is (with this module as main, 0.7 s a child)."""
    split = [[str(p) for p in paths[i::processes]] for i in range(processes)]
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.docs_floor", database_url, fmt, *share],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for share in split
        if share
    ]
    seconds = []
    for run in runs:
        out, _ = run.communicate()
        if run.returncode:
            raise RuntimeError(f"the document floor's share for {fmt} failed ({run.returncode})")
        seconds.append(float(out.strip().splitlines()[-1]))
    return len(paths) / max(seconds)


@dataclass
class Phase:
    fmt: str
    documents: int
    wall_s: float
    raw_per_s: float
    floor_per_s: float | None
    stages_s: dict[str, float]
    chunks: int
    failed: int
    grouped: int
    cpu_s: dict[str, float]


def run_phase(
    gateway: str,
    dsn: str,
    fmt: str,
    paths: list[Path],
    clients: int,
    raw_per_s: float,
    floor_per_s: float | None,
    meter: CpuMeter,
) -> Phase:
    """Upload one format's documents and wait until every one is done; its stage times from the documents."""
    meter.restart()
    started = time.perf_counter()
    with httpx.Client(base_url=gateway, timeout=120) as client, ThreadPoolExecutor(clients) as pool:
        # A tenant per format, each uploading as a client does (a 429 waited out as told): the ingest rate limit (a
        # burst of 100, then 20/s a tenant) and the tenant's backlog (1,000 waiting) are the product's.
        ids = list(pool.map(lambda path: upload(client, path, f"{USER}-{fmt}"), paths))
    # One connection, a count a poll: the benchmark's own polling stays a small part of the machine's CPU.
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FROM documents WHERE id = ANY(%s::uuid[]) "
                "AND status IN ('done', 'failed', 'duplicate')",
                (ids,),
            ).fetchone()
            ended = int(row[0]) if row else 0
            print(f"\r  {fmt:>4}: {time.perf_counter() - started:6.1f} s  {ended}/{len(ids)} done", end="", flush=True)
            if ended == len(ids):
                break
            time.sleep(0.25)
    wall_s = time.perf_counter() - started
    cpu = meter.since_start()
    print()
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT status, chunk_count, meta -> 'stages_ms' FROM documents WHERE id = ANY(%s::uuid[])", (ids,)
        ).fetchall()
    stages = {stage: sum((r[2] or {}).get(stage, 0) for r in rows) / 1000 for stage in STAGES}
    return Phase(
        fmt=fmt,
        documents=len(ids),
        wall_s=wall_s,
        raw_per_s=raw_per_s,
        floor_per_s=floor_per_s,
        stages_s=stages,
        chunks=sum(r[1] or 0 for r in rows),
        failed=sum(r[0] != "done" for r in rows),
        grouped=_grouped(dsn, ids),
        cpu_s=cpu,
    )


def _grouped(dsn: str, ids: list[str]) -> int:
    """Documents parsed in a group: claimed with another (their job says so) or claiming others."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM documents d JOIN jobs j ON j.id = d.job_id WHERE d.id = ANY(%s::uuid[]) "
            "AND (j.result ->> 'grouped')::boolean",
            (ids,),
        ).fetchone()
    return int(row[0]) if row else 0


def report(phases: list[Phase], raw_parse_ms: dict[str, float]) -> None:
    print("\nper format, one after another on one stack; rates in documents/s; stage times in ms per document")
    header = (
        "format",
        "docs",
        "raw/s",
        "e2e/s",
        "e2e/raw",
        "raw ms",
        "extract",
        "sandbox",
        "chunks",
        "grouped",
        "fail",
    )
    print("{:>6} {:>5} {:>8} {:>7} {:>8} {:>7} {:>8} {:>8} {:>7} {:>8} {:>5}".format(*header))
    rows = []
    for phase in phases:
        rate = phase.documents / phase.wall_s
        extract_ms = phase.stages_s["extract_ms"] * 1000 / phase.documents
        raw_ms = raw_parse_ms[phase.fmt]
        print(
            f"{phase.fmt:>6} {phase.documents:>5} {phase.raw_per_s:>8.1f} {rate:>7.1f} {rate / phase.raw_per_s:>8.2f} "
            f"{raw_ms:>7.1f} {extract_ms:>8.1f} {extract_ms - raw_ms:>8.1f} {phase.chunks:>7} {phase.grouped:>8} "
            f"{phase.failed:>5}"
        )
        rows.append((phase, rate, extract_ms, raw_ms))
    columns: tuple[str, ...] = (
        "format",
        "documents",
        "raw library (docs/s)",
        "document floor (docs/s)",
        "end to end (docs/s)",
    )
    columns += (
        "end to end / raw",
        "end to end / floor",
        "extract ms/doc",
        "raw parse ms/doc",
        "sandbox + sniff ms/doc",
    )
    print("\n| " + " | ".join(columns) + " |")
    print("| " + " | ".join("---" for _ in columns) + " |")
    for phase, rate, extract_ms, raw_ms in rows:
        floor = f"{phase.floor_per_s:,.1f} | " if phase.floor_per_s else "- | "
        of_floor = f"{rate / phase.floor_per_s:.2f}" if phase.floor_per_s else "-"
        print(
            f"| {phase.fmt} | {phase.documents} | {phase.raw_per_s:,.1f} | {floor}{rate:,.1f} | "
            f"{rate / phase.raw_per_s:.2f} | {of_floor} | {extract_ms:.1f} | {raw_ms:.1f} | {extract_ms - raw_ms:.1f} |"
        )
    print("\nCPU ms per document by process (trees: the worker with its pool and parser children), and wall ms")
    roles = list(phases[0].cpu_s) if phases else []
    print("{:>6} ".format("format") + " ".join(f"{r:>13}" for r in roles) + f" {'all':>8} {'wall':>8}")
    for phase in phases:
        per = {r: phase.cpu_s[r] * 1000 / phase.documents for r in roles}
        wall = phase.wall_s * 1000 / phase.documents
        cells = " ".join(f"{per[r]:>13.1f}" for r in roles)
        print(f"{phase.fmt:>6} {cells} {sum(per.values()):>8.1f} {wall:>8.1f}")
    print("\nworker stage time per format, seconds summed over its documents (worker-process seconds)")
    print("{:>6} ".format("format") + " ".join(f"{s.removesuffix('_ms'):>8}" for s in STAGES))
    for phase in phases:
        print(f"{phase.fmt:>6} " + " ".join(f"{phase.stages_s[s]:>8.2f}" for s in STAGES))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--documents",
        type=int,
        default=200,
        help="documents [200]: 30 %% pdf, 20 %% docx and html, 15 %% md and txt, a tenant per format, at the stack's "
        "defaults: past 100 documents a tenant meets the ingest rate limit (then 20 a second, "
        "MNEMOFLOW_RATE_LIMIT_INGESTS_PER_SECOND), past 1,000 waiting its backlog (MNEMOFLOW_INGEST_MAX_QUEUED)",
    )
    parser.add_argument("--audio", type=int, default=3, help="speech clips (wav, ~25 s each) on top [3]")
    parser.add_argument("--provider", default="synthetic", help="embedding provider of the stack [synthetic]")
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes, and raw parser processes [2]")
    parser.add_argument("--clients", type=int, default=4, help="parallel uploads [4]")
    args = parser.parse_args()
    os.environ["MNEMOFLOW_EMBEDDING_PROVIDER"] = args.provider

    with tempfile.TemporaryDirectory(prefix="bench-ingest-docs-") as tmp:
        started = time.perf_counter()
        files = build(Path(tmp), args.documents, args.audio)
        size = sum(p.stat().st_size for _, p in files)
        print(f"corpus: {len(files):,} documents, {size / 1e6:.1f} MB, built in {time.perf_counter() - started:.0f} s")
        by_format: dict[str, list[Path]] = defaultdict(list)
        for fmt, path in files:
            by_format[fmt].append(path)
        raw = {fmt: raw_rate(fmt, paths, args.concurrency) for fmt, paths in sorted(by_format.items())}
        # One process's parse time per document, for the sandbox's share of the worker's extract stage.
        raw_ms = {fmt: _raw_share((fmt, [str(p) for p in ps])) * 1000 / len(ps) for fmt, ps in by_format.items()}
        print("raw libraries: " + ", ".join(f"{fmt} {rate:,.1f}/s" for fmt, rate in raw.items()))
        with servers() as srv:
            floor_url = fresh_database(srv.admin_url, "mnemoflow_bench_docs_floor")
            floor = {
                fmt: document_floor(floor_url, fmt, paths, args.concurrency)
                for fmt, paths in sorted(by_format.items())
                if fmt != "wav"
            }
            print("document floor: " + ", ".join(f"{fmt} {rate:,.1f}/s" for fmt, rate in floor.items()))
            url = fresh_database(srv.admin_url, "mnemoflow_bench_ingest_docs")
            phases = []
            with stack(url, srv.redis_url, concurrency=args.concurrency, settled=False) as gateway:
                first_documents(gateway, plain_dsn(url), {f: ps for f, ps in by_format.items() if f != "wav"})
                wait_settled([psutil.Process(gateway.worker_pid), psutil.Process(gateway.gateway_pid)])
                meter = CpuMeter.of_stack(gateway, srv)
                for fmt, paths in sorted(by_format.items()):
                    phases.append(
                        run_phase(gateway, plain_dsn(url), fmt, paths, args.clients, raw[fmt], floor.get(fmt), meter)
                    )
            report(phases, raw_ms)


if __name__ == "__main__":
    main()
