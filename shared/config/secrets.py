"""Secrets a local stack makes for itself and keeps in its data dir: made once, readable by the service's user
only, the same after a restart."""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def private_dir(path: Path) -> Path:
    """`path` as a directory only its owner can enter (made if missing, tightened if it was open)."""
    path.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    os.chmod(path, PRIVATE_DIR)
    return path


def kept_secret(directory: Path, name: str) -> str:
    """The secret in `directory/name`; the first time, a new random one (`secrets.token_urlsafe(32)`), written
    mode 0600. Processes starting together agree: the file appears whole, and only the first one's is kept."""
    path = private_dir(directory) / name
    with contextlib.suppress(FileNotFoundError):
        value = path.read_text(encoding="ascii").strip()
        if value:
            os.chmod(path, PRIVATE_FILE)
            return value
    value = secrets.token_urlsafe(32)
    fd, partial = tempfile.mkstemp(dir=directory, prefix=f".{name}.")  # mkstemp makes it 0600
    try:
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(value + "\n")
        try:
            os.link(partial, path)  # fails if another process wrote it first: theirs is the one
        except FileExistsError:
            return path.read_text(encoding="ascii").strip()
    finally:
        os.unlink(partial)
    return value


def private_file(path: Path) -> int:
    """A file descriptor appending to `path`, which is made mode 0600 (and tightened if it was open)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE)
    os.fchmod(fd, PRIVATE_FILE)
    return fd
