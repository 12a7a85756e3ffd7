"""The parser sandbox's own cost per document: a round trip to a child doing nothing, small documents extracted
alone and in groups (one child for several of a tenant's documents), beside the same parse in this process.

The round trip is what the sandbox adds to every document whatever its parser costs (fork from the forkserver,
confinement, private directory, answer); the small documents show it beside real parses; "confinement" is
shared.ingest.confine.apply alone, in a forked child. Medians; documents and round trips interleaved so a busy
machine slows them alike.

    python -m bench.sandbox                  # 15 documents per format, 45 round trips
    python -m bench.sandbox --repeat 30
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import statistics
import struct
import tempfile
import time
from pathlib import Path

from shared.ingest import extract, extract_group, sniff
from shared.ingest.parsers import parse_document
from shared.ingest.sandbox import DOCUMENT_LIMITS, run_limited


def small_corpus(root: Path) -> dict[str, Path]:
    """One small file per document format the sandbox runs most often."""
    # Imported here, not at the top: sandbox children import the parent's __main__ module (this one).
    from tests.unit.ingest import samples

    (root / "notes.md").write_text(samples.MARKDOWN)
    (root / "notes.txt").write_text(samples.PLAIN_TEXT)
    (root / "article.html").write_text(samples.ARTICLE_HTML)
    return {
        "md": root / "notes.md",
        "txt": root / "notes.txt",
        "html": root / "article.html",
        "pdf": samples.pdf(root / "report.pdf", pages=2),
        "docx": samples.docx_file(root / "report.docx"),
    }


def confinement_seconds(runs: int) -> list[float]:
    """`confine.apply` alone (limits, namespaces, environment, uid, seccomp), timed in forked children."""
    from shared.ingest import confine

    times = []
    for _ in range(runs):
        workdir = tempfile.mkdtemp(prefix="bench-sandbox-child-")
        uid = DOCUMENT_LIMITS.uid_first + secrets.randbelow(DOCUMENT_LIMITS.uid_count) if os.geteuid() == 0 else None
        if uid is not None:
            os.chown(workdir, uid, uid)
        rules = confine.Confinement(
            workdir, DOCUMENT_LIMITS.memory_bytes, DOCUMENT_LIMITS.file_bytes, 300, 128, uid, False
        )
        reader, writer = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(reader)
            started = time.perf_counter()
            confine.apply(rules)
            os.write(writer, struct.pack("d", time.perf_counter() - started))
            os._exit(0)
        os.close(writer)
        times.append(struct.unpack("d", os.read(reader, 8))[0])
        os.close(reader)
        os.waitpid(pid, 0)
        shutil.rmtree(workdir, ignore_errors=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15, help="documents per format (and 3x as many round trips)")
    parser.add_argument("--group", type=int, default=8, help="documents per group (MNEMOFLOW_INGEST_GROUP_DOCUMENTS)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        corpus = small_corpus(Path(tmp))
        run_limited("warm-up", DOCUMENT_LIMITS, os.getpid)
        times: dict[str, list[float]] = {"round trip": [], **{label: [] for label in corpus}}
        grouped: dict[str, list[float]] = {label: [] for label in corpus}
        inline: dict[str, list[float]] = {label: [] for label in corpus}
        formats = {label: sniff(path) for label, path in corpus.items()}
        for label, path in corpus.items():  # imports and first calls of the parsers in this process
            parse_document(str(path), formats[label], None)
        for _ in range(args.repeat):
            for _ in range(3):
                started = time.perf_counter()
                run_limited("round trip", DOCUMENT_LIMITS, os.getpid)
                times["round trip"].append(time.perf_counter() - started)
            for label, path in corpus.items():
                started = time.perf_counter()
                extract(path, formats[label])
                times[label].append(time.perf_counter() - started)
                started = time.perf_counter()
                extract_group([(path, formats[label])] * args.group)
                grouped[label].append((time.perf_counter() - started) / args.group)
                started = time.perf_counter()
                parse_document(str(path), formats[label], None)
                inline[label].append(time.perf_counter() - started)
        times["confinement"] = confinement_seconds(3 * args.repeat)
    print(f"\nparser sandbox, ms per document (median, p90; {args.repeat} per format; worker uid {os.geteuid()})")
    for label, samples_s in times.items():
        ordered = sorted(samples_s)
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        print(f"  {label:>10}: {statistics.median(ordered) * 1000:7.1f} ms   p90 {p90 * 1000:7.1f} ms")
    print(f"\nthe sandbox's cost per document: alone, and in a group of {args.group} (one child), against the same")
    print("parse in this process (medians, ms)")
    print(f"{'format':>8} {'in process':>11} {'alone':>8} {'overhead':>9} {'grouped':>8} {'overhead':>9}")
    for label in corpus:
        raw = statistics.median(inline[label]) * 1000
        alone = statistics.median(times[label]) * 1000
        group = statistics.median(grouped[label]) * 1000
        print(f"{label:>8} {raw:>11.1f} {alone:>8.1f} {alone - raw:>9.1f} {group:>8.1f} {group - raw:>9.1f}")


if __name__ == "__main__":
    main()
