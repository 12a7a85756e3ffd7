"""Fairness between tenants, in one run: a quiet tenant's 10-item batch on an idle stack, beside a noisy tenant's
backlog of large Markdown documents with fair queues on, and with them off (MNEMOFLOW_FAIR_QUEUES=0, the baseline);
and what a long silent recording costs the parser, as the transcription ran before (the model over all of it) and
through the ingest path now (silence skipped).

Each variant gets a stack of its own (gateway + one worker process, the default local model) on a fresh store:

  (a) idle: the quiet tenant's batch, from `POST /memory/batch` to its job succeeded (the best of --repeats);
  (b) beside: the noisy tenant sends --documents Markdown files of --kb KB; once they are parsed and the first of
      their chunks stored, the quiet tenant sends its batch again, timed the same way; then the noisy tenant's
      documents are waited for (their time is printed: fairness must not lose the noisy tenant's work).

    python -m bench.fairness                     # 3 documents of 32 KB, a 26-minute silent WAV (~8 min)
    python -m bench.fairness --documents 6 --silent-minutes 5
"""

from __future__ import annotations

import argparse
import tempfile
import time
import wave
from pathlib import Path

import httpx

from bench.common import fresh_database, servers, stack
from bench.costly_inputs import environment

VARIANTS = {"fair": {"MNEMOFLOW_FAIR_QUEUES": "1"}, "fifo": {"MNEMOFLOW_FAIR_QUEUES": "0"}}
QUIET_ITEMS = 10


def noisy_document(n: int, kb: int = 32) -> str:
    """Markdown of `kb` KB: sections of a warehouse ledger, each a sentence and a table (punctuation is tokens)."""
    parts, i = [f"# Warehouse ledger {n}\n"], 0
    while sum(map(len, parts)) < kb * 1024:
        rows = "".join(f"| part-{n}-{i}-{j} | B{j:03d} | {j * 7 % 97} | ok; ~{j}% |\n" for j in range(12))
        parts.append(
            f"\n## Section {n}.{i}\n\nThe north warehouse {n} stores crate {i} of spare parts; the audit of {i} "
            f"confirms the count.\n\n| item | bin | qty | note |\n|---|---|---|---|\n{rows}"
        )
        i += 1
    return "".join(parts)[: kb * 1024]


def quiet_items(round_: str) -> list[dict[str, str]]:
    return [{"content": f"The north warehouse keeps spare oar {i} in bin {round_}-{i}."} for i in range(QUIET_ITEMS)]


def silent_wav(path: Path, seconds: float, rate: int = 8_000) -> Path:
    """Digital silence, 8 kHz 8-bit mono (26 minutes are 12.5 MB, under the upload limit)."""
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(1)
        out.setframerate(rate)
        for _ in range(int(seconds)):
            out.writeframes(b"\x80" * rate)  # 8-bit PCM is unsigned: 128 is zero
    return path


def finished(http: httpx.Client, job_id: str, user_id: str, timeout: float = 1800) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = http.get(f"/jobs/{job_id}", params={"user_id": user_id}).json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.05)
    raise TimeoutError(f"job {job_id} did not finish in {timeout:.0f} s")


def batch_seconds(http: httpx.Client, round_: str) -> float:
    started = time.monotonic()
    job_id = http.post("/memory/batch", json={"user_id": "quiet", "items": quiet_items(round_)}).json()["job_id"]
    assert finished(http, job_id, "quiet")["status"] == "succeeded"
    return time.monotonic() - started


def run_variant(url: str, documents: int, kb: int, repeats: int) -> dict[str, float]:
    with httpx.Client(base_url=url, timeout=120) as http:
        batch_seconds(http, "warm")
        idle = min(batch_seconds(http, f"idle-{i}") for i in range(repeats))
        started = time.monotonic()
        jobs = []
        for n in range(documents):
            body = {"user_id": "noisy", "content_type": "md", "data": noisy_document(n, kb), "filename": f"l{n}.md"}
            jobs.append(http.post("/memory/ingest", json=body).json()["job_id"])
        while True:
            states = [http.get(f"/jobs/{j}", params={"user_id": "noisy"}).json()["progress"] for j in jobs]
            if all(p["total"] > 0 for p in states) and any(p["done"] for p in states):
                break
            time.sleep(0.05)
        beside = batch_seconds(http, "beside")
        for job_id in jobs:
            finished(http, job_id, "noisy")
        noisy = time.monotonic() - started
    return {"idle": idle, "beside": beside, "noisy": noisy}


def silent_parse(minutes: float) -> dict[str, float]:
    """Seconds to parse a silent WAV: decoded and given whole to the model as the parser did before, decoded and
    its silence found as it does now (both in this process), and the whole ingest path's `extract` (its sandboxed
    child's start included)."""
    from faster_whisper import WhisperModel

    from shared.errors import ExtractionFailed
    from shared.ingest import Format, extract
    from shared.ingest.audio import _decode, model_dir, sound_clips

    with tempfile.TemporaryDirectory(prefix="mnemoflow-bench-wav-") as tmp:
        path = silent_wav(Path(tmp) / "silence.wav", seconds=minutes * 60)
        started = time.monotonic()
        samples, _ = _decode(str(path), Format.WAV)
        model = WhisperModel(str(model_dir()), device="cpu", compute_type="int8", cpu_threads=2)
        segments, _ = model.transcribe(
            samples, language="en", beam_size=1, vad_filter=False, condition_on_previous_text=False
        )
        spoken = sum(1 for _ in segments)
        before = time.monotonic() - started
        started = time.monotonic()
        samples, _ = _decode(str(path), Format.WAV)
        clips = sound_clips(samples)
        after = time.monotonic() - started
        started = time.monotonic()
        try:
            extract(path, Format.WAV)
            outcome = "transcribed"
        except ExtractionFailed as exc:
            outcome = exc.message
        through = time.monotonic() - started
    print(f"\n== silent WAV, {minutes:g} minutes (8 kHz, 8-bit)")
    print(f"  before: decoded, the model over all of it  {before:6.1f} s ({spoken} segments decoded)")
    print(f"  after:  decoded, silence found             {after:6.1f} s ({len(clips) // 2} clips to transcribe)")
    print(f"  ratio:                                     {before / after:6.1f}x less")
    print(f"  the ingest path's extract (sandboxed)      {through:6.1f} s: {outcome}")
    return {"before": before, "after": after, "through": through}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=3, help="the noisy tenant's Markdown files [3]")
    parser.add_argument("--kb", type=int, default=32, help="each file's size in KB [32]")
    parser.add_argument("--repeats", type=int, default=3, help="idle batches, the best counted [3]")
    parser.add_argument("--silent-minutes", type=float, default=26, help="the silent WAV's length [26]; 0: skip")
    args = parser.parse_args()
    results = {}
    with servers() as srv, environment({"MNEMOFLOW_EMBEDDING_PROVIDER": "local", "MNEMOFLOW_LOG_LEVEL": "WARNING"}):
        base = srv.redis_url.rsplit("/", 1)[0]
        for number, (label, env) in enumerate(VARIANTS.items(), start=1):
            database = fresh_database(srv.admin_url, f"bench_fairness_{label}")
            with environment(env), stack(database, f"{base}/{number}", concurrency=1) as url:
                results[label] = run_variant(url, args.documents, args.kb, args.repeats)
    fair, fifo = results["fair"], results["fifo"]
    print(f"\n== a quiet tenant's {len(quiet_items('x'))}-item batch beside {args.documents} documents of {args.kb} KB")
    print("  one worker process, the local model; seconds from the request to the job succeeded")
    print(f"  idle:                          {fair['idle']:.2f} s (fifo stack: {fifo['idle']:.2f} s)")
    print(f"  beside the backlog, fair:      {fair['beside']:.2f} s ({fair['beside'] / fair['idle']:.1f}x idle)")
    print(f"  beside the backlog, fifo:      {fifo['beside']:.2f} s ({fifo['beside'] / fifo['idle']:.1f}x idle)")
    print(f"  fifo / fair:                   {fifo['beside'] / fair['beside']:.1f}x")
    print(f"  the noisy backlog's own time:  fair {fair['noisy']:.1f} s, fifo {fifo['noisy']:.1f} s")
    if args.silent_minutes:
        silent_parse(args.silent_minutes)


if __name__ == "__main__":
    main()
