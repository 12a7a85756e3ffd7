"""Numbers stored as PostgreSQL `real`: one too small for a 32-bit float is refused with a message (a 422), never
sent to the database, where it was an underflow error (a 500; found by tests/security/test_schemathesis.py)."""

from __future__ import annotations

import uuid

import pytest
from pydantic import ValidationError

from shared.api.common import REAL_SMALLEST, storable_real
from shared.api.jobs import DecayRequest
from shared.api.memories import BatchRequest, LinkCreate, MemoryAdd, ReinforceRequest

TINY = [5e-324, 1e-300, 1e-39, -1e-40]


@pytest.mark.parametrize("value", [0.0, REAL_SMALLEST, 1e-30, 0.5, 1.0, -0.25])
def test_zero_and_numbers_a_real_holds_pass(value):
    assert storable_real(value) == value


@pytest.mark.parametrize("value", TINY)
def test_a_number_too_small_for_a_real_is_refused_saying_the_smallest(value):
    with pytest.raises(
        ValueError, match=r"too small to store as a 32-bit float; the smallest magnitude taken is 1e-38"
    ):
        storable_real(value)


@pytest.mark.parametrize(
    "build",
    [
        lambda v: LinkCreate(src_id=uuid.uuid4(), dst_id=uuid.uuid4(), weight=v),
        lambda v: ReinforceRequest(id=uuid.uuid4(), boost=v),
        lambda v: DecayRequest(ratio=v),
        lambda v: MemoryAdd(content="a note", salience=v),
        lambda v: MemoryAdd(content="a note", confidence=v),
        lambda v: BatchRequest(items=[{"content": "a note", "salience": v}]),
    ],
    ids=["link weight", "reinforce boost", "decay ratio", "salience", "confidence", "batch item salience"],
)
def test_every_request_field_stored_as_a_real_refuses_one_too_small(build):
    with pytest.raises(ValidationError, match="too small to store as a 32-bit float"):
        build(5e-324)
    build(0.5)  # and takes an ordinary one
