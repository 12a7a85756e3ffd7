"""The /lgm request schemas: OpenMemory's server's field names and its SDK's, and what they refuse."""

from __future__ import annotations

import uuid

import pytest
from pydantic import ValidationError

from shared.api.lgm import LgmContext, LgmReflection, LgmRetrieve, LgmStore


def test_node_and_node_id_are_the_same_field():
    assert LgmStore(node_id="observe", content="x").node == "observe"  # the SDK's name
    assert LgmStore(node="observe", node_id="OBSERVE", content="x").node == "observe"  # the same node twice
    with pytest.raises(ValidationError, match="disagree"):
        LgmStore(node="observe", node_id="plan", content="x")
    with pytest.raises(ValidationError, match=r"node \(or node_id\) is required"):
        LgmStore(content="x")
    with pytest.raises(ValidationError, match="node"):
        LgmRetrieve(query="x")


def test_limit_and_k_are_the_same_field():
    assert LgmRetrieve(node="plan", k=5).k == 5 and LgmRetrieve(node="plan", limit=5, k=5).limit == 5
    with pytest.raises(ValidationError, match="disagree"):
        LgmRetrieve(node="plan", limit=5, k=6)
    with pytest.raises(ValidationError):
        LgmRetrieve(node="plan", limit=0)


@pytest.mark.parametrize(
    "bad",
    [{"namespace": ""}, {"namespace": "   "}, {"namespace": "a\nb"}, {"graph_id": "x" * 129}, {"node": "a\x00b"}],
)
def test_a_scope_name_is_one_short_line(bad):
    with pytest.raises(ValidationError):
        LgmContext(**bad)


def test_unknown_fields_and_blank_content_are_refused_and_the_reflection_needs_nothing():
    with pytest.raises(ValidationError, match="Extra inputs"):
        LgmContext(namespce="typo")
    with pytest.raises(ValidationError, match="non-whitespace"):
        LgmStore(node="plan", content="   ")
    reflection = LgmReflection(node_id="reflect", context_ids=[str(uuid.UUID(int=1))])
    assert reflection.content is None and reflection.node_or("reflect") == "reflect"
    assert LgmReflection().node_or("reflect") == "reflect"
    assert LgmContext(node_id="observe", namespace=" ns ").namespace == "ns"  # the SDK sends a node: taken
