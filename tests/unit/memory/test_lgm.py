"""LangGraph memory's rules (OpenMemory's ai/graph.ts): node sectors, tags, scope, and extracted texts."""

from __future__ import annotations

from datetime import UTC, datetime

from shared.memory import lgm

STORED = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def test_each_node_has_openmemory_s_sector_and_any_other_node_is_semantic():
    assert dict(lgm.NODE_SECTORS) == {
        "observe": "episodic",
        "plan": "semantic",
        "reflect": "reflective",
        "act": "procedural",
        "emotion": "emotional",
    }
    assert lgm.node_sector("Observe ") == "episodic" and lgm.node_sector("summarise") == "semantic"
    assert lgm.node_sectors("act", ["semantic", "procedural"]) == ["procedural", "semantic"]  # the node's first
    assert lgm.node_sectors("act", []) == ["procedural"]


def test_a_node_s_memory_is_tagged_with_its_node_namespace_and_graph_once():
    assert lgm.node_tags(["mine", "lgm:node:plan"], "Plan", "ns", "g1") == [
        "mine",
        "lgm:node:plan",
        "lgm:namespace:ns",
        "lgm:graph:g1",
    ]
    assert lgm.scope_tags("ns", None) == ["lgm:namespace:ns"]


def test_metadata_records_where_the_memory_sits_and_keeps_the_caller_s():
    meta = lgm.node_metadata({"step": 3, "lgm": {"run": 7, "node": "x"}}, "ACT", "ns", None, STORED, source="s")
    assert meta == {
        "step": 3,
        "lgm": {
            "run": 7,
            "node": "act",
            "sector": "procedural",
            "namespace": "ns",
            "graph_id": None,
            "stored_at": "2026-11-26T12:00:00+00:00",
            "mode": "langgraph",
            "source": "s",
        },
    }
    assert lgm.in_scope(meta, "ns", None) and not lgm.in_scope(meta, "other", None)
    assert not lgm.in_scope(meta, "ns", "g1")  # a graph named: only that graph's
    in_graph = lgm.node_metadata({}, "plan", "ns", "g1", STORED)
    assert lgm.in_scope(in_graph, "ns", "g1") and lgm.in_scope(in_graph, "ns", None)
    assert not lgm.in_scope({}, "ns", None) and not lgm.in_scope({"lgm": "ns"}, "ns", None)
    assert lgm.stored_node(meta, "procedural") == "act" and lgm.stored_node({}, "semantic") == "semantic"


def test_an_automatic_reflection_quotes_its_memory_under_openmemory_s_header():
    text = lgm.auto_reflection("observe", "ns", "g1", "x" * 600)
    header, body = text.split("\n\n")
    assert header == 'LangGraph reflection for node "observe" | namespace=ns | graph=g1'
    assert body == "x" * 480 + "..."


def test_a_context_summary_and_a_reflection_are_extracted_from_the_graph_s_memories():
    lines = [
        ("observe", "The user opened the billing page twice"),
        ("plan", "Offer the user a discount on the billing page"),
        ("emotion", "The user sounded frustrated about the price"),
    ]
    assert lgm.context_summary(lines, 2) == (
        "- [observe] The user opened the billing page twice\n- [plan] Offer the user a discount on the billing page"
    )
    assert lgm.per_node_limit(50) == 10 and lgm.per_node_limit(3) == 1
    text = lgm.reflection(lines, "ns", "g1", 50)
    assert text is not None
    assert text.splitlines() == [
        "Reflection synthesized from LangGraph context (namespace=ns, graph=g1)",
        "Recurring: user, billing, page",  # the terms in two memories or more
        "",
        "1. [observe] The user opened the billing page twice",
        "2. [plan] Offer the user a discount on the billing page",
        "3. [emotion] The user sounded frustrated about the price",
    ]
    assert lgm.reflection([], "ns", None, 50) is None
    alone = lgm.reflection([("act", "Sent the code")], "ns", None, 50)
    assert alone == "Reflection synthesized from LangGraph context (namespace=ns)\n\n1. [act] Sent the code"
