"""Task signatures: the same on both sides of the broker, and no other message, key or argument verifies."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from kombu.utils.json import dumps, loads

from shared.security.signing import sign, verify

KEY = b"the-deployment-signing-key-0123456789"
ID = "0c1e4c9e-3a52-4c3f-9d55-6f1e2b7a9d10"  # the message's task id
JOB = uuid.UUID("5b2d6c1e-8f0a-4c47-9a43-0e3b1f2a7c11")


def test_a_message_verifies_after_the_trip_through_kombus_json():
    kwargs = {"job_id": JOB, "seq": 0, "sector": "semantic", "user_id": "alice", "at": datetime(2026, 1, 2, tzinfo=UTC)}
    signature = sign(KEY, ID, "mnemoflow.store_chunk", (), kwargs)
    arrived = loads(dumps(kwargs))  # kombu brings UUIDs and datetimes back as such: rendered alike
    assert verify(KEY, signature, ID, "mnemoflow.store_chunk", [], arrived) is None
    reordered = dict(reversed(list(arrived.items())))  # JSON objects keep no order a signature may depend on
    assert verify(KEY, signature, ID, "mnemoflow.store_chunk", [], reordered) is None


def test_only_the_same_task_arguments_and_key_verify():
    kwargs = {"job_id": str(JOB), "seq": 0, "sector": "semantic", "user_id": "alice"}
    signature = sign(KEY, ID, "mnemoflow.store_chunk", [], kwargs)
    assert verify(KEY, signature, ID, "mnemoflow.store_chunk", [], kwargs) is None
    assert verify(KEY, signature, ID, "mnemoflow.store_chunk", [], kwargs | {"user_id": "bob"}) == "bad signature"
    assert verify(KEY, signature, ID, "mnemoflow.decay_cycle", [], kwargs) == "bad signature"
    assert verify(KEY, signature, ID, "mnemoflow.store_chunk", [1], kwargs) == "bad signature"
    assert (
        verify(KEY, signature, str(uuid.uuid4()), "mnemoflow.store_chunk", [], kwargs) == "bad signature"
    )  # replayed under a new id
    assert (
        verify(b"another-key-0123456789abcdef", signature, ID, "mnemoflow.store_chunk", [], kwargs) == "bad signature"
    )
    assert verify(KEY, None, ID, "mnemoflow.store_chunk", [], kwargs) == "unsigned"
    assert verify(KEY, "", ID, "mnemoflow.store_chunk", [], kwargs) == "unsigned"
    assert verify(KEY, 42, ID, "mnemoflow.store_chunk", [], kwargs) == "unsigned"
    assert (
        verify(KEY, "v0:" + signature[3:], ID, "mnemoflow.store_chunk", [], kwargs) == "signed with an unknown scheme"
    )


def test_a_refusal_names_no_argument():
    kwargs = {"user_id": "alice", "content": "alice's diary"}
    for why in (verify(KEY, None, ID, "t", [], kwargs), verify(KEY, sign(KEY, ID, "t", [], {}), ID, "t", [], kwargs)):
        assert why is not None and "alice" not in why
