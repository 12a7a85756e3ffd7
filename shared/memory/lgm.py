"""LangGraph memory, OpenMemory's `/lgm/*` (its `ai/graph.ts`): which sector a graph node's memories go to, how
they are tagged and scoped to a namespace and a graph, and the texts of a graph's context and reflections. Pure.

A node's memory is stored with its node's sector first (observe → episodic, plan → semantic, reflect →
reflective, act → procedural, emotion → emotional; any other node → semantic), the tags `lgm:node:<node>`,
`lgm:namespace:<ns>` and `lgm:graph:<id>`, and `metadata.lgm` = {node, sector, namespace, graph_id, stored_at,
mode}. Retrieval reads a namespace (and graph) through the tags and keeps only what `metadata.lgm` places there,
as OpenMemory does. The namespace and graph are scope keys: they link nothing (shared.memory.sequence).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any

from shared.memory.digest import cut, terms, top_terms

NODE_SECTORS: Mapping[str, str] = MappingProxyType(
    {"observe": "episodic", "plan": "semantic", "reflect": "reflective", "act": "procedural", "emotion": "emotional"}
)
DEFAULT_SECTOR = "semantic"  # a node OpenMemory's map does not name
REFLECT = "reflect"
SUMMARY_LINE_CHARS = 160  # a memory's line in a context summary or a reflection
AUTO_REFLECTION_CHARS = 480  # what an automatic reflection quotes of the memory it reflects
REFLECTION_TERMS = 5


@dataclass(frozen=True)
class LgmParams:
    """OpenMemory's LangGraph settings (OM_LG_NAMESPACE, OM_LG_MAX_CONTEXT, OM_LG_REFLECTIVE), its defaults."""

    namespace: str = "default"  # the namespace of a request that names none
    max_context: int = 50  # memories in a context (and a reflection) when the request sets no limit
    reflective: bool = True  # a stored memory gets an automatic reflection unless the request says otherwise


def node_name(node: str) -> str:
    return node.strip().lower()


def node_sector(node: str) -> str:
    """The sector a node's memories go to."""
    return NODE_SECTORS.get(node_name(node), DEFAULT_SECTOR)


def node_sectors(node: str, classified: Sequence[str]) -> list[str]:
    """A node's memory's sectors: its node's first (the primary), then the others its content was classified into."""
    first = node_sector(node)
    return [first, *(s for s in classified if s != first)]


def scope_tags(namespace: str, graph_id: str | None) -> list[str]:
    """The tags that place a memory in a namespace (and a graph): what retrieval filters on."""
    return [f"lgm:namespace:{namespace}", *([f"lgm:graph:{graph_id}"] if graph_id else [])]


def node_tags(tags: Sequence[str], node: str, namespace: str, graph_id: str | None) -> list[str]:
    """The caller's tags, then the node's and its scope's (OpenMemory's `build_tags`), each once."""
    ordered = dict.fromkeys([*tags, f"lgm:node:{node_name(node)}", *scope_tags(namespace, graph_id)])
    return list(ordered)


def node_metadata(
    metadata: Mapping[str, Any],
    node: str,
    namespace: str,
    graph_id: str | None,
    stored_at: datetime,
    **extra: Any,
) -> dict[str, Any]:
    """The caller's metadata with `lgm` set to where the memory sits in the graph (an `lgm` object the caller sent
    keeps its other keys; OpenMemory's `build_meta`)."""
    base = dict(metadata)
    given = base.get("lgm")
    earlier: dict[str, Any] = given if isinstance(given, dict) else {}
    base["lgm"] = {
        **earlier,
        "node": node_name(node),
        "sector": node_sector(node),
        "namespace": namespace,
        "graph_id": graph_id,
        "stored_at": stored_at.isoformat(),
        "mode": "langgraph",
        **extra,
    }
    return base


def in_scope(metadata: Mapping[str, Any], namespace: str, graph_id: str | None) -> bool:
    """Whether a memory's metadata places it in the namespace (and, when one is named, the graph)."""
    lgm = metadata.get("lgm")
    if not isinstance(lgm, dict) or lgm.get("namespace") != namespace:
        return False
    return not graph_id or lgm.get("graph_id") == graph_id


def stored_node(metadata: Mapping[str, Any], primary_sector: str) -> str:
    """The node a memory was stored by (OpenMemory: its primary sector when it has no `lgm` metadata)."""
    lgm = metadata.get("lgm")
    node = lgm.get("node") if isinstance(lgm, dict) else None
    return node if isinstance(node, str) and node else primary_sector


def auto_reflection(node: str, namespace: str, graph_id: str | None, content: str) -> str:
    """The automatic reflection of a node's memory (OpenMemory's `build_refl_content`)."""
    parts = [f'LangGraph reflection for node "{node}"', f"namespace={namespace}"]
    if graph_id:
        parts.append(f"graph={graph_id}")
    return " | ".join(parts) + "\n\n" + cut_keeping_lines(content, AUTO_REFLECTION_CHARS)


def cut_keeping_lines(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars].rstrip() + "..."


def per_node_limit(limit: int) -> int:
    """How many memories of each node a context of `limit` memories holds (at least one)."""
    return max(1, limit // len(NODE_SECTORS))


def context_summary(lines: Sequence[tuple[str, str]], limit: int) -> str:
    """A context's summary: one `- [node] content` line per memory, at most `limit` ("" for none)."""
    return "\n".join(f"- [{node}] {cut(content, SUMMARY_LINE_CHARS)}" for node, content in lines[:limit])


def reflection(lines: Sequence[tuple[str, str]], namespace: str, graph_id: str | None, limit: int) -> str | None:
    """A reflection extracted from a graph's recent memories (`(node, content)`, each node's newest first), no
    model: the terms that recur in them (in two or more), then the memories themselves, numbered; None when there
    are none."""
    if not lines:
        return None
    scope = f"namespace={namespace}" + (f", graph={graph_id}" if graph_id else "")
    out = [f"Reflection synthesized from LangGraph context ({scope})"]
    shared = top_terms([(terms(content), 0.0) for _, content in lines], REFLECTION_TERMS, min_documents=2)
    if shared:
        out.append("Recurring: " + ", ".join(shared))
    out.append("")
    numbered = enumerate(lines[:limit], 1)
    out.extend(f"{i}. [{node}] {cut(content, SUMMARY_LINE_CHARS)}" for i, (node, content) in numbered)
    return "\n".join(out)
