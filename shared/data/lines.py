"""The export format's lines, both ways: rows as JSON lines, vectors as base64 float32, and each line read back
into its schema (shared.api.data) with its line number in the error. Pure: no IO."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import numpy as np
from pydantic import ValidationError

from shared.api.data import ExportedDocument, ExportedMemory, ExportedWaypoint, ExportEnd, ExportHeader
from shared.errors import InvalidInput
from shared.memory.storable import check_storable, may_hold_unstorable

Line = ExportHeader | ExportedDocument | ExportedMemory | ExportedWaypoint | ExportEnd
_BY_TYPE: dict[str, type[Line]] = {
    "header": ExportHeader,
    "document": ExportedDocument,
    "memory": ExportedMemory,
    "waypoint": ExportedWaypoint,
    "end": ExportEnd,
}
VectorRow = tuple[str, str, np.ndarray]  # sector, model, vector


def encode_vector(vector: np.ndarray) -> str:
    """A vector as base64 of its little-endian float32 values."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def decode_vector(data: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(data), dtype="<f4").astype(np.float32)


def dumps(line: Mapping[str, Any]) -> bytes:
    """One line of the file: compact JSON, times in ISO 8601, ids as strings, a newline."""
    return json.dumps(line, separators=(",", ":"), ensure_ascii=False, default=_plain).encode("utf-8") + b"\n"


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def grouped_vectors(vectors: Iterable[VectorRow]) -> list[dict[str, Any]]:
    """A memory's vectors, one entry per distinct vector of a model with the sectors it serves (in simple mode
    one vector serves every sector of the memory: it is written once)."""
    groups: dict[tuple[str, bytes], dict[str, Any]] = {}
    for sector, model, vector in vectors:
        raw = np.asarray(vector, dtype="<f4").tobytes()
        entry = groups.setdefault(
            (model, raw),
            {"sectors": [], "model": model, "dim": len(raw) // 4, "data": base64.b64encode(raw).decode("ascii")},
        )
        entry["sectors"].append(sector)
    return list(groups.values())


def memory_line(row: Mapping[str, Any], vectors: Iterable[VectorRow], *, indexed: bool) -> dict[str, Any]:
    """A memory row (shared.storage.transfer's columns) as its line."""
    line = {"type": "memory"} | {key: value for key, value in row.items() if key != "meta"}
    line["metadata"] = row.get("meta") or {}
    line["indexed"] = indexed
    line["vectors"] = grouped_vectors(vectors)
    return line


def document_line(row: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "document", **row}


def waypoint_line(row: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "waypoint", **row}


def parse(raw: bytes | str, number: int) -> Line:
    """Line `number` (1-based) of a file, validated; InvalidInput saying which line and what is wrong."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise InvalidInput(f"line {number}: not a JSON object ({exc})", details={"line": number}) from exc
    if not isinstance(data, dict):
        raise InvalidInput(f"line {number}: not a JSON object", details={"line": number})
    # json.loads reads a surrogate's escape, and its bytes too (it decodes with "surrogatepass")
    if may_hold_unstorable(raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass")):
        check_storable(data, prefix=f"line {number}: ", line=number)
    kind = data.get("type")
    model = _BY_TYPE.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise InvalidInput(
            f"line {number}: type {kind!r} is not one of {', '.join(_BY_TYPE)}", details={"line": number}
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or kind
        raise InvalidInput(
            f"line {number} ({kind}): {where}: {first.get('msg', 'invalid value')}",
            details={"line": number, "errors": len(exc.errors())},
        ) from exc
