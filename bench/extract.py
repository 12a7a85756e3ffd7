"""Extraction throughput per format: sniff → extract (sandboxed child) → chunk, on a generated mixed corpus.

Also, measured in the same run: PDF text extraction with pypdfium2 (what we use) against pypdf, in process
(unstructured's PDF partitioner needs its [pdf] extra, which brings torch, so it is not installed here),
and the sandbox's own cost per document (a round trip to a forked child doing nothing).

    python -m bench.extract              # 50-page PDFs, ~5 documents per format
    python -m bench.extract --repeat 10
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from shared.ingest import Format, chunk_elements, extract, sniff
from shared.ingest.sandbox import DOCUMENT_LIMITS, run_limited


@dataclass
class Row:
    """Timings of one format over its documents."""

    label: str
    unit: str  # "pages", "chars" or "audio s"
    documents: int = 0
    size_bytes: int = 0
    units: float = 0.0
    chunks: int = 0
    sniff_s: list[float] = field(default_factory=list)
    extract_s: list[float] = field(default_factory=list)
    chunk_s: list[float] = field(default_factory=list)


def build_corpus(root: Path, pages: int) -> dict[str, Path]:
    """One file per format, sized like real documents."""
    # Imported here, not at the top: sandbox children import the parent's __main__ module (this one), and
    # the sample generators' libraries would add ~150 ms to every measured document.
    from tests.unit.ingest import samples

    long_markdown = "\n\n".join(
        f"## Section {n}\n\n" + " ".join([samples.MARKDOWN.split("\n\n")[1]] * 6) for n in range(60)
    )
    article = samples.ARTICLE_HTML.replace(
        "</article>", "".join(f"<h2>Part {n}</h2><p>{samples.PLAIN_TEXT * 3}</p>" for n in range(40)) + "</article>"
    )
    (root / "article.html").write_text(article)
    (root / "guide.md").write_text(long_markdown)
    (root / "notes.txt").write_text(samples.PLAIN_TEXT * 400)
    speech = samples.speech_wav(root / "speech.wav", samples.TALK)
    return {
        "pdf": samples.pdf(root / "report.pdf", pages=pages, paragraphs_per_page=6),
        "docx": samples.docx_file(root / "report.docx", sections=60),
        "html": root / "article.html",
        "md": root / "guide.md",
        "txt": root / "notes.txt",
        "wav (speech)": speech,
        "mp3 (speech)": samples.reencode(speech, root / "speech.mp3", "mp3"),
        "mp4 (video)": samples.reencode(speech, root / "talk.mp4", "mp4"),
    }


def measure(label: str, path: Path, repeat: int) -> Row:
    row = Row(label, "chars")
    for _ in range(repeat):
        started = time.perf_counter()
        fmt = sniff(path)
        sniffed = time.perf_counter()
        extracted = extract(path, fmt)
        extracted_at = time.perf_counter()
        chunks = chunk_elements(extracted.elements, document_metadata=extracted.metadata)
        done = time.perf_counter()
        row.sniff_s.append(sniffed - started)
        row.extract_s.append(extracted_at - sniffed)
        row.chunk_s.append(done - extracted_at)
        row.documents += 1
        row.size_bytes += path.stat().st_size
        row.chunks += len(chunks)
        if fmt is Format.PDF:
            row.unit, row.units = "pages", row.units + extracted.metadata["page_count"]
        elif fmt.kind.value != "document":
            row.unit, row.units = "audio s", row.units + extracted.metadata["duration_s"]
        else:
            row.units += len(extracted.text)
    return row


def pdf_libraries(path: Path, repeat: int) -> dict[str, float | None]:
    """Seconds per document for text extraction in process, per library (None when not installed)."""

    def with_pdfium() -> int:
        import pypdfium2 as pdfium

        pdf = pdfium.PdfDocument(str(path))
        total = sum(len(pdf[i].get_textpage().get_text_bounded()) for i in range(len(pdf)))
        pdf.close()
        return total

    def with_pypdf() -> int:
        import pypdf

        return sum(len(page.extract_text()) for page in pypdf.PdfReader(str(path)).pages)

    results: dict[str, float | None] = {}
    for name, run in (("pypdfium2", with_pdfium), ("pypdf", with_pypdf)):
        results[name] = _median_time(run, repeat)
    return results


def _median_time(run: Callable[[], int], repeat: int) -> float | None:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        try:
            run()
        except ImportError:
            return None
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=50, help="pages of the PDF")
    parser.add_argument("--repeat", type=int, default=5, help="documents per format (each a full sniff/extract/chunk)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-extract-") as tmp:
        corpus = build_corpus(Path(tmp), args.pages)
        started = time.perf_counter()
        run_limited("warm-up", DOCUMENT_LIMITS, time.monotonic)
        forkserver_s = time.perf_counter() - started
        roundtrips = []
        for _ in range(20):
            started = time.perf_counter()
            run_limited("round trip", DOCUMENT_LIMITS, time.monotonic)
            roundtrips.append(time.perf_counter() - started)
        rows = [measure(label, path, args.repeat) for label, path in corpus.items()]
        libraries = pdf_libraries(corpus["pdf"], args.repeat)

    print(f"\nextraction per format, {args.repeat} documents each (sniff → sandboxed extract → chunk 2048/256)")
    print(f"  sandbox: forkserver start with parsers preloaded {forkserver_s:.2f} s once per process;")
    print(f"  round trip to a forked child {statistics.median(roundtrips) * 1000:.1f} ms per document (median)")
    header = ("format", "doc KB", "docs/s", "MB/s", "units/s", "unit", "sniff ms", "extract ms", "chunk ms", "chunks")
    print("{:>13} {:>8} {:>8} {:>8} {:>11} {:>8} {:>9} {:>11} {:>9} {:>7}".format(*header))
    for row in rows:
        total = sum(row.sniff_s) + sum(row.extract_s) + sum(row.chunk_s)
        print(
            f"{row.label:>13} {row.size_bytes / row.documents / 1024:>8.1f} {row.documents / total:>8.2f} "
            f"{row.size_bytes / total / 1e6:>8.2f} {row.units / total:>11,.0f} {row.unit:>8} "
            f"{statistics.median(row.sniff_s) * 1000:>9.2f} {statistics.median(row.extract_s) * 1000:>11.1f} "
            f"{statistics.median(row.chunk_s) * 1000:>9.2f} {row.chunks // row.documents:>7}"
        )
    print(f"\nPDF text extraction in process, {args.pages} pages (median of {args.repeat}):")
    pdfium_s = libraries["pypdfium2"]
    for name, seconds in libraries.items():
        if seconds is None:
            print(f"  {name:>10}: not installed")
            continue
        ratio = "" if pdfium_s is None or name == "pypdfium2" else f"  ({seconds / pdfium_s:.1f}x pypdfium2)"
        print(f"  {name:>10}: {seconds * 1000:8.1f} ms, {args.pages / seconds:8.0f} pages/s{ratio}")
    print("  unstructured (strategy fast): not measured, it needs the [pdf] extra (pdfminer; torch via its inference)")


if __name__ == "__main__":
    main()
