"""Document ingestion end to end: upload a generated mixed corpus through the gateway until every document is done.

Each document goes gateway (sniff, stage in PostgreSQL) → ingest worker (read, sandboxed extract, chunk,
classify, plan) → embed.<sector> workers (embed, store) → finished with reading-order links. The stage
times are what the tasks record on each document (documents.meta.stages_ms), summed per format; the
throughput is the whole run's wall time. Every document has distinct text (the same bytes would be one
document).

    python -m bench.ingest_docs                          # 1,000 documents, synthetic embeddings
    python -m bench.ingest_docs --documents 200 --provider local

Measured here (2 cores, one worker of 2 processes): 1,003 documents (18 MB, 2,873 chunks) in 187 s with
synthetic embeddings: 5.4 docs/s, 15 chunks/s; extraction is ~97% of the work (~0.33 s per document through
unstructured, ~0.09 s per PDF through PDFium). With the local MiniLM model (100 documents): 1.8 docs/s,
and embedding is the larger part: (extract + store) / embed = 0.27.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg

from bench.common import SUBJECTS, VERBS, corpus, fresh_database, plain_dsn, servers, stack

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
    with open(path, "rb") as handle:
        response = client.post("/memory/ingest/file", files={"file": (path.name, handle)}, data={"user_id": user})
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


def report(dsn: str, wall_s: float, upload_s: float) -> None:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT format, status, byte_size, chunk_count, meta -> 'stages_ms' FROM documents"
        ).fetchall()
        memories = conn.execute("SELECT count(*) FROM memories").fetchone()
        links = conn.execute("SELECT count(*) FROM waypoints WHERE kind = 'next'").fetchone()
    per: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for fmt, status, size, chunks, stages in rows:
        for key in (fmt, "all"):
            row = per[key]
            row["documents"] += 1
            row["failed"] += status != "done"
            row["bytes"] += size or 0
            row["chunks"] += chunks
            for stage in STAGES:
                row[stage] += (stages or {}).get(stage, 0)
    total = per["all"]
    print(
        f"\n{int(total['documents']):,} documents ({int(total['failed'])} not done), {total['bytes'] / 1e6:.1f} MB, "
        f"{int(total['chunks']):,} chunks -> {memories[0] if memories else 0:,} memories, "
        f"{links[0] if links else 0:,} next links"
    )
    print(
        f"end to end: {wall_s:.1f} s wall (uploads took {upload_s:.1f} s): {total['documents'] / wall_s:.2f} docs/s, "
        f"{total['chunks'] / wall_s:.1f} chunks/s, {total['bytes'] / 1e6 / wall_s:.2f} MB/s"
    )
    print("\nper format: stage time in worker-process seconds (summed over its documents), and throughput per")
    print("worker-process second of ingest work (read+extract+chunk+classify+embed+store)")
    header = (
        "format",
        "docs",
        "KB/doc",
        "chunks",
        *(s.removesuffix("_ms") for s in STAGES),
        "docs/s",
        "chunks/s",
        "MB/s",
    )
    print("{:>6} {:>6} {:>7} {:>7} {:>7} {:>8} {:>7} {:>9} {:>7} {:>7} {:>7} {:>9} {:>6}".format(*header))
    for fmt in sorted(per, key=lambda f: (f == "all", f)):
        row = per[fmt]
        busy = sum(row[s] for s in STAGES) / 1000 or 1e-9
        print(
            f"{fmt:>6} {int(row['documents']):>6} {row['bytes'] / row['documents'] / 1024:>7.1f} "
            f"{int(row['chunks']):>7} "
            + " ".join(f"{row[s] / 1000:>{w}.1f}" for s, w in zip(STAGES, (7, 8, 7, 9, 7, 7), strict=True))
            + f" {row['documents'] / busy:>7.1f} {row['chunks'] / busy:>9.1f} {row['bytes'] / 1e6 / busy:>6.2f}"
        )
    embed = total["embed_ms"] or 1e-9
    print(
        f"\n(extract + store) / embed = ({total['extract_ms'] / 1000:.1f} + {total['store_ms'] / 1000:.1f}) s / "
        f"{embed / 1000:.1f} s = {(total['extract_ms'] + total['store_ms']) / embed:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=1000, help="documents (pdf/docx/html/md/txt) [1000]")
    parser.add_argument("--audio", type=int, default=3, help="speech clips (wav, ~25 s each) on top [3]")
    parser.add_argument("--provider", default="synthetic", help="embedding provider of the stack [synthetic]")
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes [2]")
    parser.add_argument("--clients", type=int, default=4, help="parallel uploads [4]")
    args = parser.parse_args()
    os.environ["MNEMOFLOW_EMBEDDING_PROVIDER"] = args.provider

    with tempfile.TemporaryDirectory(prefix="bench-ingest-docs-") as tmp:
        started = time.perf_counter()
        files = build(Path(tmp), args.documents, args.audio)
        size = sum(p.stat().st_size for _, p in files)
        print(f"corpus: {len(files):,} documents, {size / 1e6:.1f} MB, built in {time.perf_counter() - started:.0f} s")
        with servers() as srv:
            url = fresh_database(srv.admin_url, "mnemoflow_bench_ingest_docs")
            with stack(url, srv.redis_url, concurrency=args.concurrency) as gateway:
                started = time.perf_counter()
                with httpx.Client(base_url=gateway, timeout=120) as client, ThreadPoolExecutor(args.clients) as pool:
                    list(pool.map(lambda item: upload(client, item[1]), files))
                upload_s = time.perf_counter() - started

                def progress(counts: dict[str, int]) -> None:
                    line = "  ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                    print(f"\r  {time.perf_counter() - started:6.0f} s  {line}", end="", flush=True)

                wait_until_ingested(plain_dsn(url), len(files), progress)
                wall_s = time.perf_counter() - started
                report(plain_dsn(url), wall_s, upload_s)


if __name__ == "__main__":
    main()
