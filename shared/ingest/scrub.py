"""Imported first by the parsers' forkserver: wipe the worker's environment (DATABASE_URL, keys) out of it.

The forkserver starts with the worker's environment, and every parser child is a fork of it, holding a copy of
its memory: clearing the child's environment is not enough, the secrets would still be in its heap. So the
forkserver drops every variable but a few harmless ones before it imports anything else, overwriting the
strings (Python's and the C library's) rather than only forgetting them.

Importing this anywhere but in the forkserver's start-up does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing.forkserver
import os
import sys

# Locale, time zone, paths and the thread-count knobs of the numeric libraries; nothing that names a service.
_KEPT = {"PATH", "HOME", "TMPDIR", "LANG", "LANGUAGE", "TZ", "DO_NOT_TRACK", "UNSTRUCTURED_DISABLE_NOTICE"}
_KEPT_PREFIXES = ("LC_", "OMP_", "OPENBLAS_", "MKL_")


def kept(name: str) -> bool:
    """Whether the forkserver keeps the environment variable `name`."""
    return name in _KEPT or name.startswith(_KEPT_PREFIXES)


def scrub_environment() -> None:
    """Drop every variable `kept` refuses, overwrite its value in place, and zero the process's initial block."""
    data: dict[bytes, bytes] = os.environ._data  # type: ignore[attr-defined]
    for key in [k for k in data if not kept(k.decode(errors="replace"))]:
        _overwrite(data[key])
        os.unsetenv(key)
        del data[key]
    for key, value in list(data.items()):
        os.putenv(key, value)  # a fresh copy, so the C library's environment no longer points into the block
    zero_initial_block()


def zero_initial_block() -> None:
    """Overwrite the environment the kernel handed the process (what /proc/self/environ reads)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/self/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # fields 50 and 51: env_start, env_end
        if 0 < start < end:
            ctypes.memset(start, 0, end - start)


def _overwrite(value: bytes) -> None:
    # CPython keeps a bytes object's contents inline, one byte before the end of its fixed part. Objects of 0 and
    # 1 bytes are shared singletons (and hold no secret): those are left alone.
    if len(value) > 1:
        ctypes.memset(id(value) + bytes.__basicsize__ - 1, 0, len(value))


def _in_forkserver_start() -> bool:
    frame = sys._getframe()
    while frame is not None:
        if frame.f_code is multiprocessing.forkserver.main.__code__:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


if _in_forkserver_start():
    scrub_environment()
