"""Started with this directory on PYTHONPATH, a Python process cannot import the top-level modules named in
MNEMOFLOW_TEST_BLOCKED_MODULES (comma-separated): an install without an optional extra, for the tests of
shared/ingest/extras.py. Python imports `sitecustomize` at start-up, before any of the process's own code."""

from __future__ import annotations

import importlib.abc
import os
import sys

BLOCKED = frozenset(filter(None, os.environ.get("MNEMOFLOW_TEST_BLOCKED_MODULES", "").split(",")))


class _Uninstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {fullname!r} (blocked by the test)", name=fullname)
        return None


if BLOCKED:
    sys.meta_path.insert(0, _Uninstalled())
