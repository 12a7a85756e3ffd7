"""Functions the sandbox tests run in a child process (they must be importable by name there)."""

from __future__ import annotations

import ctypes
import os
import time

from shared.errors import ExtractionFailed


def vm_size_bytes() -> int:
    """This process's address space, as /proc reports it."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmSize in /proc/self/status")


def allocate(megabytes: int) -> int:
    """Hold `megabytes` MiB at once (a stand-in for a parser inflating a bomb)."""
    blocks = [bytearray(1024 * 1024) for _ in range(megabytes)]
    return len(blocks)


def sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def segfault() -> None:
    """Crash the way a buggy C parser does."""
    ctypes.string_at(0)


def refuse() -> None:
    raise ExtractionFailed("this document is refused", details={"why": "test"})


def child_pid() -> int:
    return os.getpid()
