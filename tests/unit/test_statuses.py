"""A job's, chunk's, document's or decay run's status is written with the enums of `shared.model.statuses`, never
as a string literal, outside the vocabulary itself and the API schemas (whose `Literal` types are the API's words)."""

from __future__ import annotations

import ast
from pathlib import Path

from shared.model.statuses import ChunkStatus, DocumentStatus, JobStatus, RunStatus

ROOT = Path(__file__).resolve().parents[2]
WORDS = {str(s) for enum in (JobStatus, ChunkStatus, DocumentStatus, RunStatus) for s in enum}
EXEMPT = ("shared/model/", "shared/api/")
MARKER = "# API words"  # a line that fills an API schema's `Literal` (mypy takes no enum member for it)


def _is_status(node: ast.AST) -> bool:
    """`status`, `x.status`, `x["status"]`."""
    if isinstance(node, ast.Name):
        return node.id == "status"
    if isinstance(node, ast.Attribute):
        return node.attr == "status"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "status"
    return False


def _literals(node: ast.AST | None) -> list[str]:
    """The status words `node` spells as literals: a string, a tuple, list or set of them, either arm of an `if`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value] if node.value in WORDS else []
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [word for element in node.elts for word in _literals(element)]
    if isinstance(node, ast.IfExp):
        return _literals(node.body) + _literals(node.orelse)
    return []


def status_literals(source: str) -> list[tuple[int, str]]:
    """(line, word) of each status written as a literal: compared with a status, given as `status=`, or set under
    a `"status"` key."""
    found: list[tuple[int, str]] = []
    marked = {n for n, line in enumerate(source.splitlines(), start=1) if MARKER in line}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(_is_status(side) for side in (node.left, *node.comparators)):
            found += [(node.lineno, w) for side in (node.left, *node.comparators) for w in _literals(side)]
        elif isinstance(node, ast.keyword) and node.arg == "status":
            found += [(node.value.lineno, w) for w in _literals(node.value)]
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "status":
                    found += [(value.lineno, w) for w in _literals(value)]
    return [(line, word) for line, word in found if line not in marked]


def test_the_scan_finds_each_way_of_writing_a_status():
    source = """
if job["status"] == "succeeded": pass
if run.status in ("queued", "running"): pass
finish(job_id, status="failed" if broken else "succeeded")
row = {"status": "cancelled", "phase": "done"}
note = {"phase": "queued"}  # a phase, not a status
accepted(status="queued")  # API words
"""
    assert sorted(w for _, w in status_literals(source)) == [
        "cancelled",
        "failed",
        "queued",
        "running",
        "succeeded",
        "succeeded",
    ]


def test_no_status_is_a_string_literal_outside_the_vocabulary():
    offenders = []
    for top in ("shared", "services", "workers"):
        for path in sorted((ROOT / top).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith(EXEMPT):
                continue
            offenders += [f"{relative}:{line}: {word!r}" for line, word in status_literals(path.read_text())]
    assert offenders == [], "use shared.model.statuses' enums:\n" + "\n".join(offenders)
