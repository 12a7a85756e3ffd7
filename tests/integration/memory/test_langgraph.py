"""LangGraph memory on real PostgreSQL: a node's memory in its node's sector, read back only in its namespace and
graph, a graph's context, and a reflection drawn from it."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from shared.api.lgm import LgmContext, LgmReflection, LgmStore
from shared.errors import InvalidInput
from shared.memory.langgraph import LangGraphMemory
from shared.memory.lgm import LgmParams

pytestmark = pytest.mark.integration


@pytest.fixture
def graphs(engine) -> LangGraphMemory:
    return LangGraphMemory(engine, LgmParams(reflective=False))


def store(db, graphs, tenant, **fields):
    with db.session() as s:
        return graphs.store(s, tenant, LgmStore(**fields))


def test_a_node_s_memory_goes_to_its_node_s_sector_whatever_its_words_say(db, graphs, tenant):
    # the words are a feeling's (emotional), the node is a plan's: semantic first, emotional after
    stored = store(db, graphs, tenant, node="plan", content="I feel so happy and excited, I love this plan!!")
    assert stored.memory.primary_sector == "semantic" and "emotional" in stored.memory.sectors
    assert stored.memory.namespace == "default" and stored.reflection is None
    odd = store(db, graphs, tenant, node="Summarise", content="A node OpenMemory's map does not name")
    assert (odd.memory.node, odd.memory.primary_sector) == ("summarise", "semantic")


def test_reading_stays_in_the_namespace_and_the_graph(db, graphs, tenant):
    one = store(db, graphs, tenant, node="observe", content="Saw the red door", namespace="a", graph_id="g1").memory
    two = store(db, graphs, tenant, node="observe", content="Saw the blue door", namespace="a", graph_id="g2").memory
    store(db, graphs, tenant, node="observe", content="Saw the green door", namespace="b")
    with db.session() as s:
        in_a = graphs.recent(s, tenant, "observe", "a", None, 10, include_metadata=False)
        in_g1 = graphs.recent(s, tenant, "observe", "a", "g1", 10, include_metadata=True)
        plans = graphs.recent(s, tenant, "plan", "a", None, 10, include_metadata=False)
        other_tenant = graphs.recent(s, f"{tenant}-x", "observe", "a", None, 10, include_metadata=False)
    assert [i.id for i in in_a] == [two.id, one.id]  # the most recently seen first
    assert [i.id for i in in_g1] == [one.id] and in_g1[0].metadata["lgm"]["graph_id"] == "g1"
    assert plans == [] and other_tenant == []


def test_a_context_groups_each_node_s_newest_and_a_reflection_is_drawn_from_it(db, engine, tenant):
    graphs = LangGraphMemory(engine, LgmParams(reflective=True, max_context=10))
    with db.session() as s, pytest.raises(InvalidInput, match="has no memories yet; store some first or send"):
        graphs.reflect(s, tenant, LgmReflection(namespace="quiet"))
    for i in range(3):
        stored = store(db, graphs, tenant, node="act", content=f"Restarted the worker, attempt {i}", namespace="ops")
        assert stored.reflection is not None and stored.reflection.node == "reflect"
    with db.session() as s:
        context = graphs.context(s, tenant, LgmContext(namespace="ops", limit=10))
    counts = {n.node: len(n.items) for n in context.nodes}
    assert counts == {"observe": 0, "plan": 0, "reflect": 2, "act": 2, "emotion": 0}  # 10 // 5 each
    assert "- [act] Restarted the worker, attempt 2" in context.summary
    assert len(context.summary.splitlines()) == 4  # a line per memory of the context
    with db.session() as s:
        reflected = graphs.reflect(s, tenant, LgmReflection(namespace="ops", context_ids=[]))
        content = s.execute(
            text("SELECT content FROM memories WHERE id = :id"), {"id": reflected.memory.id}
        ).scalar_one()
    assert reflected.memory.primary_sector == "reflective" and reflected.reflection is None
    assert content.startswith("Reflection synthesized from LangGraph context (namespace=ops)")
    assert "[act] Restarted the worker, attempt 2" in content and "Recurring: " in content
