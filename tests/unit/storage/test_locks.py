"""Advisory locks: one module holds every key, and no two locks share one."""

from __future__ import annotations

import re
from pathlib import Path

from shared.storage.locks import Lock

ROOT = Path(__file__).resolve().parents[3]


def test_every_lock_has_a_key_of_its_own():
    keys = [int(lock) for lock in Lock]
    assert len(keys) == len(set(keys)) == len(list(Lock.__members__.values()))
    assert Lock.DECAY_CYCLE != Lock.INDEX_DDL  # they once shared 727277: a cycle held up every start-up


def test_no_advisory_lock_is_taken_outside_the_locks_module():
    taken = re.compile(r"pg_(try_)?advisory_(xact_)?(un)?lock")
    offenders = [
        str(path.relative_to(ROOT))
        for package in ("shared", "services", "workers", "infra")
        for path in (ROOT / package).rglob("*.py")
        if taken.search(path.read_text()) and path != ROOT / "shared" / "storage" / "locks.py"
    ]
    assert offenders == []
