"""Run one parse in a child process under a memory cap and a wall-clock limit.

A decompression bomb, a pathological file or a crash in a C parser then fails that document with a
clear `ExtractionFailed` instead of taking the calling worker down. Children come from a forkserver
that has the parsers already imported (unstructured and its spaCy model take ~2.5 s to load), so
each document costs a fork, not an interpreter start.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import resource
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from shared.errors import ExtractionFailed, InvalidInput, MnemoflowError
from shared.ingest.formats import Kind
from shared.ingest.params import MIB, IngestParams

T = TypeVar("T")

GIB = 1024**3
# A parser error after the address space peaked this close to the cap is reported as the cap being hit.
_NEAR_LIMIT = 0.85
# Modules the forkserver imports once so every child starts with them loaded; the parent never imports them.
_PRELOAD = ["shared.ingest.unstructured_setup", "pypdfium2", "trafilatura", "faster_whisper", "av"]
_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(_PRELOAD)


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-document parser limits: wall-clock seconds and address space (RLIMIT_AS) bytes of the child."""

    timeout_s: float = 120.0
    memory_bytes: int = 2 * GIB

    def __post_init__(self) -> None:
        if self.timeout_s <= 0 or self.memory_bytes <= 0:
            raise InvalidInput(f"parser limits must be positive, got {self}")


def limits_for(params: IngestParams, kind: Kind) -> Limits:
    """The parser limits of a document, or of audio and video (transcription takes longer)."""
    if kind is Kind.DOCUMENT:
        return Limits(params.parse_timeout_seconds, params.parse_memory_mb * MIB)
    return Limits(params.media_timeout_seconds, params.media_memory_mb * MIB)


DOCUMENT_LIMITS = limits_for(IngestParams(), Kind.DOCUMENT)
# Transcription runs at roughly 10x real time on two cores with tiny.en: half an hour covers ~5 h of audio.
MEDIA_LIMITS = limits_for(IngestParams(), Kind.AUDIO)


def run_limited(label: str, limits: Limits, func: Callable[..., T], *args: Any) -> T:
    """`func(*args)` in a fresh child under `limits`; its result, or its error re-raised here.

    `func` must be importable by name (module-level) and its arguments and result picklable. As with any
    non-fork start method, a script calling this needs the `if __name__ == "__main__":` guard.
    `label` names the work in error messages ("docx document", "audio").
    """
    receiver, sender = _context.Pipe(duplex=False)
    child = _context.Process(target=_child_main, args=(sender, limits.memory_bytes, func, args), daemon=True)
    child.start()
    sender.close()
    started = time.monotonic()
    try:
        if not receiver.poll(limits.timeout_s):
            raise ExtractionFailed(
                f"{label}: parsing took longer than the {limits.timeout_s:g} s limit and was stopped",
                details={"limit": "time", "timeout_s": limits.timeout_s},
            )
        try:
            outcome, payload = receiver.recv()
        except EOFError:
            child.join(5)
            raise _died(label, limits, child.exitcode) from None
    finally:
        receiver.close()
        if child.is_alive() and child.pid is not None:
            # The whole process group, so a parser's own helpers (pandoc for EPUB/ODT) die with it; then the
            # child itself, in case it was stopped before it made that group.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.kill()
        child.join()
    if outcome == "ok":
        return payload
    error_class, message, details = payload
    elapsed = time.monotonic() - started
    raise error_class(f"{label}: {message}", details={**(details or {}), "elapsed_s": round(elapsed, 3)})


def _child_main(sender: Connection, memory_bytes: int, func: Callable[..., Any], args: tuple[Any, ...]) -> None:
    os.setpgrp()
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = memory_bytes if hard == resource.RLIM_INFINITY else min(memory_bytes, hard)  # never above the hard limit
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    try:
        result: tuple[str, Any] = ("ok", func(*args))
    except MnemoflowError as exc:
        result = ("error", (type(exc), exc.message, exc.details))
    except MemoryError:
        result = ("error", (ExtractionFailed, f"exceeded the {_memory_message(memory_bytes)}", {"limit": "memory"}))
    except Exception as exc:
        # A parser's own exception types may not unpickle in the parent; send its text instead.
        detail = f"{type(exc).__name__}: {exc}"
        peak = _peak_address_space()
        if peak is not None and peak >= _NEAR_LIMIT * memory_bytes:
            # C parsers report a refused allocation in their own words (libxml2: "unknown error").
            message = f"exceeded the {_memory_message(memory_bytes)} (the parser then failed with {detail})"
            result = ("error", (ExtractionFailed, message, {"limit": "memory", "peak_bytes": peak}))
        else:
            result = ("error", (ExtractionFailed, f"the file could not be parsed ({detail})", None))
    try:
        sender.send(result)
    except MemoryError:
        sender.send(("error", (ExtractionFailed, f"exceeded the {_memory_message(memory_bytes)}", {"limit": "memory"})))
    finally:
        sender.close()


def _died(label: str, limits: Limits, exitcode: int | None) -> ExtractionFailed:
    if exitcode is not None and exitcode < 0:
        # Native parsers that hit RLIMIT_AS tend to abort (SIGABRT after a failed allocation) rather than raise.
        return ExtractionFailed(
            f"{label}: the parser crashed (signal {signal.Signals(-exitcode).name}), "
            f"most likely at the {_memory_message(limits.memory_bytes)}",
            details={"limit": "memory", "exitcode": exitcode},
        )
    return ExtractionFailed(
        f"{label}: the parser process exited without an answer (exit code {exitcode})",
        details={"exitcode": exitcode},
    )


def _peak_address_space() -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmPeak:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _memory_message(memory_bytes: int) -> str:
    return f"memory limit of {memory_bytes / GIB:.2g} GiB"


def warm_up() -> None:
    """Start the forkserver (parsers imported, ~3-6 s) now rather than in the first document's time limit."""
    run_limited("warm-up", DOCUMENT_LIMITS, os.getpid)
