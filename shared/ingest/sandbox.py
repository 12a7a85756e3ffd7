"""Run one parse in a child process that is confined, limited and thrown away after that one document.

A decompression bomb, a pathological file, a crash or an exploited bug in a C parser (FFmpeg, pandoc, libxml2,
PDFium) then fails that document with a clear error, and cannot reach the worker's secrets, the network or
another document. Each child (shared/ingest/confine.py) gets a private directory as HOME and TMPDIR holding its
copy of the input, a clean environment, no network, its own unprivileged uid when the worker is root, resource
limits and a seccomp filter; it answers in JSON (shared/ingest/answers.py), read under a size cap and the time
limit. No child is reused: one fork per document, or per group of one tenant's small documents claimed together
(shared/ingest/group.py), so no tenant's document meets another's in a parser process.

Children come from a forkserver that has the parsers already imported (unstructured and its spaCy model take
~2.5 s to load), so each document costs a fork, not an interpreter start.
"""

from __future__ import annotations

import contextlib
import encodings
import logging
import math
import multiprocessing
import os
import pkgutil
import secrets
import shutil
import signal
import struct
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TypeVar

from shared.errors import ExtractionFailed, InvalidInput, MnemoflowError, ServiceUnavailable
from shared.ingest import answers, confine
from shared.ingest.formats import Kind
from shared.ingest.params import MIB, IngestParams

T = TypeVar("T")

GIB = 1024**3
log = logging.getLogger(__name__)
# A parser error after the address space peaked this close to the cap is reported as the cap being hit.
_NEAR_LIMIT = 0.85
# Modules the forkserver imports once so every child starts with them loaded; the parent never imports them.
# The standard library's codecs and DOM go too: parsers import them lazily (a page's charset picks its codec),
# and the child's uid may not be able to read the interpreter's own files (a Python installed under /root).
_STANDARD_LIBRARY = [
    "xml.dom.minidom",
    "xml.dom.expatbuilder",
    *(f"encodings.{module.name}" for module in pkgutil.iter_modules(encodings.__path__)),
]
# scrub.py goes first: it wipes the worker's environment out of the forkserver before anything copies it.
_PARSERS = ["shared.ingest.unstructured_setup", "shared.ingest.preload", "faster_whisper", "av"]
_PRELOAD = ["shared.ingest.scrub", *_PARSERS, *_STANDARD_LIBRARY]
_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(_PRELOAD)
_LENGTH = struct.Struct("!Q")
_warned: set[str] = set()


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-document limits of a parser child and the policy confining it.

    Wall-clock seconds; address space (RLIMIT_AS), bytes written to any one file (RLIMIT_FSIZE), bytes of the
    answer, tasks of its uid (RLIMIT_NPROC); the uids children run as when the worker is root (`uid_first`
    and the `uid_count` after it, one drawn at random per child; 1 makes it a fixed uid such as 65534); and
    `strict`: refuse to parse where a guard cannot be set up, rather than warn.
    """

    timeout_s: float = 120.0
    memory_bytes: int = 2 * GIB
    file_bytes: int = 256 * MIB
    output_bytes: int = 64 * MIB
    processes: int = 128
    uid_first: int = 2_000_000_000
    uid_count: int = 16_777_216
    strict: bool = False

    def __post_init__(self) -> None:
        sizes = (self.timeout_s, self.memory_bytes, self.file_bytes, self.output_bytes, self.processes)
        if min(sizes) <= 0 or self.uid_first <= 0 or self.uid_count <= 0:
            raise InvalidInput(f"parser limits must be positive, got {self}")


def limits_for(params: IngestParams, kind: Kind) -> Limits:
    """The parser limits of a document, or of audio and video (transcription takes longer)."""
    document = kind is Kind.DOCUMENT
    return Limits(
        timeout_s=params.parse_timeout_seconds if document else params.media_timeout_seconds,
        memory_bytes=(params.parse_memory_mb if document else params.media_memory_mb) * MIB,
        file_bytes=params.parse_file_mb * MIB,
        output_bytes=params.parse_output_mb * MIB,
        processes=params.parse_processes,
        uid_first=params.sandbox_uid,
        uid_count=params.sandbox_uids,
        strict=params.sandbox_strict,
    )


DOCUMENT_LIMITS = limits_for(IngestParams(), Kind.DOCUMENT)
# Transcription runs at roughly 10x real time on two cores with tiny.en: half an hour covers ~5 h of audio.
MEDIA_LIMITS = limits_for(IngestParams(), Kind.AUDIO)


def run_limited(label: str, limits: Limits, func: Callable[..., T], *args: Any) -> T:
    """`func(*args)` in a fresh confined child under `limits`; its result, or its error re-raised here.

    `func` must be importable by name (module-level), its arguments picklable and its result an `Extracted` or
    plain JSON data. As with any non-fork start method, a script calling this needs the `if __name__ ==
    "__main__":` guard. `label` names the work in error messages ("docx document", "audio").
    """
    return _run(label, limits, func, args, None)


def run_on_file(label: str, limits: Limits, func: Callable[..., T], path: str, *args: Any) -> T:
    """`func(copy, *args)`, as `run_limited`, where `copy` is the child's own copy of the file at `path`."""
    return _run(label, limits, func, args, path)


def run_on_files(label: str, limits: Limits, func: Callable[..., T], paths: list[str], *args: Any) -> T:
    """`func(copies, *args)`, as `run_on_file` for several files in one child: the caller vouches that they are one
    tenant's (a child never reads two tenants' documents); `copies` are the child's own copies, in order."""
    return _run(label, limits, func, args, paths)


def _run(
    label: str, limits: Limits, func: Callable[..., Any], args: tuple[Any, ...], source: str | list[str] | None
) -> Any:
    uid = limits.uid_first + secrets.randbelow(limits.uid_count) if os.geteuid() == 0 else None
    started = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="mnemoflow-sandbox-")
    try:
        if source is not None:
            copies = []
            for number, path in enumerate([source] if isinstance(source, str) else source):
                copy = Path(workdir) / (f"input{number or ''}" + Path(path).suffix)
                shutil.copyfile(path, copy)
                copy.chmod(0o444)
                copies.append(str(copy))
            args = (copies[0] if isinstance(source, str) else copies, *args)
        if uid is not None:
            os.chown(workdir, uid, uid)
        rules = confine.Confinement(
            workdir=workdir,
            memory_bytes=limits.memory_bytes,
            file_bytes=limits.file_bytes,
            cpu_seconds=math.ceil(limits.timeout_s * (os.cpu_count() or 1)) + 1,
            processes=limits.processes,
            uid=uid,
            strict=limits.strict,
            path=os.environ.get("PATH", confine.DEFAULT_PATH),
        )
        payload = _exchange(label, limits, uid, (rules, limits.output_bytes, limits.uid_count > 1, func, args))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    answer = answers.decode(payload)
    if answer.report is not None:
        _warn_once(answer.report)
    if answer.error is None:
        return answer.value
    error = answer.error
    elapsed_s = round(time.monotonic() - started, 3)
    raise type(error)(f"{label}: {error.message}", details={**(error.details or {}), "elapsed_s": elapsed_s})


def _exchange(label: str, limits: Limits, uid: int | None, child_args: tuple[Any, ...]) -> bytes:
    """Start the child, read its answer within the time limit and the size cap, and leave nothing of it running."""
    receiver, sender = _context.Pipe(duplex=False)
    child = _context.Process(target=_child_main, args=(sender, *child_args), daemon=True)
    child.start()
    sender.close()
    deadline = time.monotonic() + limits.timeout_s
    answered = False
    try:
        header = _read(receiver, _LENGTH.size, deadline, label, limits)
        if header is None:
            child.join(5)
            raise _died(label, limits, child.exitcode)
        (length,) = _LENGTH.unpack(header)
        if length > limits.output_bytes:
            raise ExtractionFailed(
                f"{label}: the parser's answer ({length / MIB:.1f} MiB) is over the {limits.output_bytes / MIB:g} MiB "
                "limit on what a parser may return",
                details={"limit": "output", "output_bytes": length},
            )
        body = _read(receiver, length, deadline, label, limits)
        if body is None:
            child.join(5)
            raise _died(label, limits, child.exitcode)
        answered = True
        return body
    finally:
        receiver.close()
        if child.is_alive() and child.pid is not None:
            # The whole process group, so a parser's own helpers (pandoc for EPUB/ODT) die with it; then the
            # child itself, in case it was stopped before it made that group.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.kill()
        child.join()
        if uid is not None and limits.uid_count > 1 and not answered:
            _kill_uid(uid)


def _read(receiver: Connection, size: int, deadline: float, label: str, limits: Limits) -> bytes | None:
    """`size` bytes from the child before `deadline`; None when it closed the pipe first (it died)."""
    data = bytearray()
    while len(data) < size:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not receiver.poll(remaining):
            raise ExtractionFailed(
                f"{label}: parsing took longer than the {limits.timeout_s:g} s limit and was stopped",
                details={"limit": "time", "timeout_s": limits.timeout_s},
            )
        chunk = os.read(receiver.fileno(), min(size - len(data), 1 << 20))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _child_main(
    sender: Connection,
    rules: confine.Confinement,
    output_bytes: int,
    own_uid: bool,
    func: Callable[..., Any],
    args: tuple[Any, ...],
) -> None:
    os.setpgrp()
    _let_go_of_the_worker()
    report = None
    try:
        report = confine.apply(rules)
        payload = answers.encode(func(*args), report)
    except MnemoflowError as exc:
        payload = answers.encode_error(type(exc), exc.message, exc.details, report)
    except MemoryError:
        payload = answers.encode_error(ExtractionFailed, _over_memory(rules.memory_bytes), {"limit": "memory"}, report)
    except Exception as exc:
        payload = answers.encode_error(*_parser_failure(exc, rules.memory_bytes, report is None), report)
    if len(payload) > output_bytes:
        message = f"the parser's output ({len(payload) / MIB:.1f} MiB) is over the {output_bytes / MIB:g} MiB limit"
        payload = answers.encode_error(ExtractionFailed, message, {"limit": "output"}, report)
    try:
        os.write(sender.fileno(), _LENGTH.pack(len(payload)))
        view = memoryview(payload)
        while view:
            view = view[os.write(sender.fileno(), view) :]
    finally:
        sender.close()
        _end_descendants(rules.uid if own_uid else None)


def _let_go_of_the_worker() -> None:
    """Close the two pipes every forkserver child inherits from the worker, which a parser never needs.

    The first is how the forkserver knows its worker lives: a child holding it keeps the forkserver up after the
    worker died, and the child's parent-death signal (confine.py) would never come. The second writes to the
    worker's resource tracker, a process running as the worker's uid.
    """
    from multiprocessing import forkserver, resource_tracker

    for holder, name in ((forkserver._forkserver, "_forkserver_alive_fd"), (resource_tracker._resource_tracker, "_fd")):
        fd = getattr(holder, name, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
            setattr(holder, name, None)


def _end_descendants(own_uid: int | None) -> None:
    """Kill whatever the parser started and left running, before this child exits (its answer is written)."""
    if own_uid is not None and os.getresuid() == (own_uid, own_uid, own_uid):
        os.kill(-1, signal.SIGKILL)  # every process of this child's uid, drawn for it alone; kill spares the caller
    else:
        os.killpg(0, signal.SIGKILL)  # its process group (setsid and setpgid are filtered), this child included


def _parser_failure(exc: Exception, memory_bytes: int, in_setup: bool) -> tuple[type[MnemoflowError], str, Any]:
    # A parser's own exception types may not survive the trip; send their text instead.
    detail = f"{type(exc).__name__}: {exc}"
    if in_setup:
        return ServiceUnavailable, f"the parser sandbox could not be set up ({detail})", None
    peak = _peak_address_space()
    # C parsers report a refused allocation in their own words (libxml2: "unknown error"); pandoc, a process of
    # its own under the same limit, says "out of memory".
    if (peak is not None and peak >= _NEAR_LIMIT * memory_bytes) or "out of memory" in detail.lower():
        message = f"exceeded the {_memory_message(memory_bytes)} (the parser then failed with {detail})"
        return ExtractionFailed, message, {"limit": "memory", "peak_bytes": peak}
    return ExtractionFailed, f"the file could not be parsed ({detail})", None


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


def _kill_uid(uid: int) -> None:
    """Kill every process running as `uid` (a child's own, drawn for it alone) until none is left."""
    for _ in range(20):
        found = False
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{entry.name}/status") as status:
                    real = next(line for line in status if line.startswith("Uid:")).split()[1]
                if int(real) == uid:
                    found = True
                    os.kill(int(entry.name), signal.SIGKILL)
        if not found:
            return
        time.sleep(0.01)


def _warn_once(report: confine.Report) -> None:
    for gap in report.missing:
        if gap not in _warned:
            _warned.add(gap)
            strict = "MNEMOFLOW_INGEST_SANDBOX_STRICT, on in production, refuses documents then"
            log.warning("parser sandbox: %s (%s)", gap, strict)


def _peak_address_space() -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmPeak:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _over_memory(memory_bytes: int) -> str:
    return f"exceeded the {_memory_message(memory_bytes)}"


def _memory_message(memory_bytes: int) -> str:
    return f"memory limit of {memory_bytes / GIB:.2g} GiB"


def warm_up() -> None:
    """Start the forkserver (parsers imported, ~3-6 s) now rather than in the first document's time limit."""
    run_limited("warm-up", DOCUMENT_LIMITS, os.getpid)
