"""The export format's lines: vectors survive the round trip bit for bit, one model's shared vector is written
once, and each bad line is refused with its number and what is wrong."""

from __future__ import annotations

import base64
import json
import math
import struct
import uuid
from datetime import UTC, datetime

import numpy as np
import pytest

from shared.api.data import ExportedMemory, ExportedWaypoint, ExportEnd, ExportHeader
from shared.data import lines
from shared.errors import InvalidInput

WHEN = "2026-01-01T10:00:00+00:00"


def memory(**fields):
    base = {
        "type": "memory",
        "id": str(uuid.uuid4()),
        "content": "The ferry leaves at seven",
        "primary_sector": "semantic",
        "sectors": ["semantic", "episodic"],
        "salience": 0.5,
        "decay_lambda": 0.005,
        "created_at": WHEN,
        "updated_at": WHEN,
        "last_seen_at": WHEN,
    }
    return base | fields


def test_a_vector_survives_the_round_trip_bit_for_bit():
    vector = np.random.default_rng(7).standard_normal(384).astype(np.float32)
    decoded = lines.decode_vector(lines.encode_vector(vector))
    assert decoded.dtype == np.float32 and decoded.tobytes() == vector.tobytes()


def test_one_models_vector_serves_its_sectors_once_another_models_apart():
    shared = np.ones(4, dtype=np.float32)
    own = np.full(4, 2.0, dtype=np.float32)
    grouped = lines.grouped_vectors([("semantic", "m1", shared), ("episodic", "m1", shared), ("emotional", "m2", own)])
    assert [(g["sectors"], g["model"], g["dim"]) for g in grouped] == [
        (["semantic", "episodic"], "m1", 4),
        (["emotional"], "m2", 4),
    ]
    assert lines.decode_vector(grouped[1]["data"]).tolist() == [2.0] * 4


def test_a_memory_row_becomes_a_line_that_reads_back():
    row = {k: v for k, v in memory().items() if k != "type"} | {"meta": {"session_id": "s1"}, "tags": ["trip"]}
    row |= {"created_at": datetime(2026, 1, 1, tzinfo=UTC), "id": uuid.uuid4()}
    vector = np.ones(8, dtype=np.float32)
    raw = lines.dumps(lines.memory_line(row, [("semantic", "m", vector), ("episodic", "m", vector)], indexed=False))
    assert raw.endswith(b"\n") and b"\n" not in raw[:-1]
    parsed = lines.parse(raw, 3)
    assert isinstance(parsed, ExportedMemory)
    assert parsed.metadata == {"session_id": "s1"} and parsed.indexed is False and parsed.id == row["id"]
    assert parsed.vector_of("episodic") is parsed.vector_of("semantic") and parsed.vector_of("procedural") is None


def test_every_kind_of_line_is_read_into_its_schema():
    header = {
        "type": "header",
        "version": 1,
        "user_id": "alice",
        "exported_at": WHEN,
        "mnemoflow": "0.1.0",
        "vectors": True,
    }
    waypoint = {
        "type": "waypoint",
        "src_id": str(uuid.uuid4()),
        "dst_id": str(uuid.uuid4()),
        "kind": "next",
        "weight": 1.0,
        "created_at": WHEN,
        "updated_at": WHEN,
    }
    end = {"type": "end", "documents": 0, "memories": 1, "waypoints": 1}
    kinds = [type(lines.parse(json.dumps(line), i)) for i, line in enumerate((header, waypoint, end), start=1)]
    assert kinds == [ExportHeader, ExportedWaypoint, ExportEnd]


def _vector(values) -> dict:
    data = base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()
    return {"sectors": ["semantic"], "model": "m", "dim": len(values), "data": data}


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (b"{not json", "line 7: not a JSON object"),
        (b"[1, 2]", "line 7: not a JSON object"),
        (json.dumps({"type": "photo"}).encode(), "type 'photo' is not one of header, document, memory"),
        (json.dumps(memory(id="nope")), "line 7 (memory): id"),
        (json.dumps(memory(primary_sector="episodic")), "must be the first of sectors"),
        (json.dumps(memory(sectors=["semantic", "dreams"])), "unknown sector 'dreams'"),
        (json.dumps(memory(salience=1.5)), "salience"),
        (json.dumps(memory(content="   ")), "non-whitespace"),
        (json.dumps(memory(compression="compressed")), "names its vector_dim"),
        (json.dumps(memory(vectors=[_vector([1.0, math.nan])])), "not a finite number"),
        (json.dumps(memory(vectors=[_vector([0.0, 0.0])])), "all zeros"),
        (json.dumps(memory(vectors=[_vector([1.0]) | {"dim": 2}])), "2 float32 values are 8"),
        (json.dumps(memory(vectors=[_vector([1.0]) | {"sectors": ["reflective"]}])), "each vector serves sectors"),
        (
            json.dumps(
                {
                    "type": "header",
                    "version": 9,
                    "user_id": "a",
                    "exported_at": WHEN,
                    "mnemoflow": "9",
                    "vectors": False,
                }
            ),
            "newer than this server reads",
        ),
        (
            json.dumps(
                {
                    "type": "waypoint",
                    "src_id": str(uuid.UUID(int=1)),
                    "dst_id": str(uuid.UUID(int=1)),
                    "kind": "next",
                    "weight": 1,
                    "created_at": WHEN,
                    "updated_at": WHEN,
                }
            ),
            "two different memories",
        ),
        ("[" * 100_000, "line 7: not a JSON object"),
    ],
)
def test_a_bad_line_is_refused_with_its_number_and_what_is_wrong(line, said):
    with pytest.raises(InvalidInput) as refused:
        lines.parse(line, 7)
    assert said in refused.value.message
    assert refused.value.details["line"] == 7
