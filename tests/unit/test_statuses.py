"""A job's, chunk's, document's or decay run's status, a job's kind and phase, are written with their enums
(`shared.model.statuses`, `shared.jobs.JobKind`), never as string literals, outside the vocabularies themselves and
the API schemas (whose `Literal` types are the API's words)."""

from __future__ import annotations

import ast
from pathlib import Path

from shared.jobs import JobKind
from shared.model.statuses import ChunkStatus, DocumentStatus, JobPhase, JobStatus, RunStatus

ROOT = Path(__file__).resolve().parents[2]
STATUSES = {str(s) for enum in (JobStatus, ChunkStatus, DocumentStatus, RunStatus) for s in enum}
KINDS = {str(kind) for kind in JobKind}
PHASES = {str(phase) for phase in JobPhase}
EXEMPT = ("shared/model/", "shared/api/", "shared/jobs.py")
MARKER = "# API words"  # a line that fills an API schema's `Literal` (mypy takes no enum member for it)


VOCABULARIES = {"status": STATUSES, "kind": KINDS, "phase": PHASES}  # a name, attribute or key -> the words it takes


def _named(node: ast.AST) -> str | None:
    """`status` for `status`, `x.status` and `x["status"]` (and so for `kind`)."""
    if isinstance(node, ast.Name):
        name = node.id
    elif isinstance(node, ast.Attribute):
        name = node.attr
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        name = node.slice.value
    else:
        return None
    return name if name in VOCABULARIES else None


def _literals(node: ast.AST | None, words: set[str]) -> list[str]:
    """The `words` `node` spells as literals: a string, a tuple, list or set of them, either arm of an `if`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value] if node.value in words else []
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [word for element in node.elts for word in _literals(element, words)]
    if isinstance(node, ast.IfExp):
        return _literals(node.body, words) + _literals(node.orelse, words)
    return []


def status_literals(source: str) -> list[tuple[int, str]]:
    """(line, word) of each status or kind written as a literal: compared with one, given as `status=` or `kind=`,
    or set under a `"status"` or `"kind"` key."""
    found: list[tuple[int, str]] = []
    marked = {n for n, line in enumerate(source.splitlines(), start=1) if MARKER in line}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = (node.left, *node.comparators)
            for name in {_named(side) for side in sides} - {None}:
                found += [(node.lineno, w) for side in sides for w in _literals(side, VOCABULARIES[str(name)])]
        elif isinstance(node, ast.keyword) and node.arg in VOCABULARIES:
            found += [(node.value.lineno, w) for w in _literals(node.value, VOCABULARIES[node.arg])]
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value in VOCABULARIES:
                    found += [(value.lineno, w) for w in _literals(value, VOCABULARIES[key.value])]
    return [(line, word) for line, word in found if line not in marked]


def test_the_scan_finds_each_way_of_writing_a_status():
    source = """
if job["status"] == "succeeded": pass
if run.status in ("queued", "running"): pass
finish(job_id, status="failed" if broken else "succeeded")
row = {"status": "cancelled", "phase": "done"}
note = {"phase": "queued"}
accepted(status="queued")  # API words
if job["kind"] == "batch" or kind in ("ingest",): pass
"""
    assert sorted(w for _, w in status_literals(source)) == [
        "batch",
        "cancelled",
        "done",
        "failed",
        "ingest",
        "queued",
        "queued",
        "running",
        "succeeded",
        "succeeded",
    ]


def test_no_status_or_kind_is_a_string_literal_outside_the_vocabulary():
    offenders = []
    for top in ("shared", "services", "workers"):
        for path in sorted((ROOT / top).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative.startswith(EXEMPT):
                continue
            offenders += [f"{relative}:{line}: {word!r}" for line, word in status_literals(path.read_text())]
    assert offenders == [], "use shared.model.statuses' enums, or JobKind:\n" + "\n".join(offenders)
