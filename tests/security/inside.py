"""What the sandbox tests run inside a parser child (importable by name there), and a command to run them in a
fresh interpreter whose environment holds secrets: `python -c "from tests.security.inside import main; main()"`.
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import json
import os
import resource
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from pathlib import Path

_LIMITS = ("RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_NPROC", "RLIMIT_CORE", "RLIMIT_CPU")


def identity() -> dict:
    """Who and where the child is: ids, environment, directories, limits, network namespace."""
    try:
        with open("/proc/self/environ", "rb") as environ:
            kernel_environment = environ.read().decode(errors="replace")
    except OSError as exc:
        kernel_environment = f"unreadable: {exc.strerror}"
    return {
        "pid": os.getpid(),
        "uid": os.getuid(),
        "euid": os.geteuid(),
        "gid": os.getgid(),
        "groups": os.getgroups(),
        "environment": dict(os.environ),
        "kernel_environment": kernel_environment,
        "cwd": os.getcwd(),
        "limits": {name: list(resource.getrlimit(getattr(resource, name))) for name in _LIMITS},
        "network_namespace": os.readlink("/proc/self/ns/net"),
    }


def connect(family: str, address: str, port: int) -> str:
    """Try a TCP (or, with family "unix", a Unix socket) connection; what happened, in words."""
    try:
        if family == "unix":
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(2)
                sock.connect(address)
        else:
            with socket.create_connection((address, port), timeout=2):
                pass
    except OSError as exc:
        return f"refused: {exc!r}"
    return "connected"


def write_file(size: int) -> dict:
    """Write `size` bytes to a file in the child's TMPDIR: the error, if any, and how much landed."""
    path = Path(os.environ.get("TMPDIR", "/tmp")) / "big.bin"
    error = None
    try:
        with open(path, "wb") as out:
            for _ in range(size // 65536):
                out.write(b"\0" * 65536)
    except OSError as exc:
        error = exc.errno
    return {"errno": error, "written": path.stat().st_size}


def start_threads(count: int) -> int:
    """How many of `count` threads could be started at once."""
    release = threading.Event()
    started = []
    try:
        for _ in range(count):
            thread = threading.Thread(target=release.wait, daemon=True)
            thread.start()
            started.append(thread)
    except RuntimeError:  # "can't start new thread"
        pass
    release.set()
    for thread in started:
        thread.join()
    return len(started)


def leave_behind(marker: str) -> dict:
    """Start a long sleep and leave it running, try to start one in a session of its own, leave a file in HOME."""
    left = subprocess.Popen(["sleep", "300"])
    try:
        escaped = subprocess.Popen(["sleep", "300"], start_new_session=True)
        session = f"escaped as {escaped.pid}"
    except OSError as exc:
        session = f"refused: {exc!r}"
    home = Path(os.environ["HOME"])
    (home / marker).write_text("left by the previous child")
    return {"sleeper": left.pid, "session": session, "home": str(home), "uid": os.getuid()}


def look_around(marker: str, other_home: str) -> dict:
    """What a later child sees of an earlier one: its marker file in its own HOME or in the other's."""
    mine = Path(os.environ["HOME"]) / marker
    return {
        "uid": os.getuid(),
        "pid": os.getpid(),
        "home": os.environ["HOME"],
        "in_my_home": mine.exists(),
        "other_home_exists": os.path.exists(other_home),
    }


class _Planted:
    """Unpickling this calls open(path, "w"): a file appears if the parent unpickles what the child sent."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (open, (self.path, "w"))


def send_pickle(path: str) -> None:
    """Answer with a pickle that would create `path` when loaded, then exit before the real answer."""
    for candidate in gc.get_objects():
        if isinstance(candidate, Connection) and candidate.writable and not candidate.closed:
            candidate.send(_Planted(path))
    os._exit(0)


def claim_huge_answer() -> None:
    """Announce a 1 TiB answer, then exit."""
    for candidate in gc.get_objects():
        if isinstance(candidate, Connection) and candidate.writable and not candidate.closed:
            os.write(candidate.fileno(), (1 << 40).to_bytes(8, "big"))
    os._exit(0)


def text_of(size: int) -> str:
    return "x" * size


def sleep_and_report(pid_file: str) -> None:
    """Write this child's pid to `pid_file`, then sleep as long as it is let."""
    Path(pid_file).write_text(str(os.getpid()))
    threading.Event().wait(600)


def memory_holds(prefix: str, digest: str) -> list[str]:
    """The mappings of this process holding `prefix` followed by 32 characters whose SHA-256 is `digest`.

    The secret itself is never passed in, so the search cannot find its own copy.
    """
    needle = prefix.encode()
    found = []
    with open("/proc/self/maps") as maps:
        regions = [line.split() for line in maps]
    for region in regions:
        name = region[5] if len(region) > 5 else "anonymous"
        start, end = (int(bound, 16) for bound in region[0].split("-"))
        # Writable private memory: heap, stack and anonymous mappings (file mappings are the libraries' code).
        if not region[1].startswith("rw") or name not in ("anonymous", "[heap]", "[stack]"):
            continue
        data = ctypes.string_at(start, end - start)
        at = data.find(needle)
        while at >= 0:
            candidate = data[at + len(needle) : at + len(needle) + 32]
            if hashlib.sha256(candidate).hexdigest() == digest:
                found.append(name)
            at = data.find(needle, at + 1)
    return found


def main() -> None:
    """Run `identity` and `memory_holds(prefix, digest)` in a sandbox child; print both as JSON."""
    from shared.ingest.sandbox import DOCUMENT_LIMITS, run_limited

    prefix, digest = sys.argv[1:3]
    result = {
        "identity": run_limited("identity", DOCUMENT_LIMITS, identity),
        "holders": run_limited("memory", DOCUMENT_LIMITS, memory_holds, prefix, digest),
    }
    print(json.dumps(result))
