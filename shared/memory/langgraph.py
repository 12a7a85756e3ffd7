"""LangGraph memory over a tenant's store (OpenMemory's `/lgm/*`): a node's memories stored in its node's sector and
scoped to a namespace and graph (the rules: `shared.memory.lgm`), read back newest first or as a query found them,
a graph's context, and reflections extracted from it. A query's own run is the gateway's (it reinforces what it
returns, as `POST /memory/query` does); what it found comes back here to be scoped and shaped.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from shared.api.lgm import (
    LgmContext,
    LgmContextResult,
    LgmItem,
    LgmMemory,
    LgmNodeContext,
    LgmReflection,
    LgmStore,
    LgmStored,
)
from shared.api.memories import MemoryCreate
from shared.errors import InvalidInput
from shared.memory import lgm
from shared.memory import sectors as sector_rules
from shared.memory.engine import MemoryEngine, Reading
from shared.storage import memories as memory_store
from shared.storage.rows import MemoryFilter
from shared.text import normalize_content


class LangGraphMemory:
    """The write path (`MemoryEngine`) and OpenMemory's LangGraph settings; stateless otherwise."""

    def __init__(self, engine: MemoryEngine, params: lgm.LgmParams) -> None:
        self.engine = engine
        self.params = params

    def namespace(self, requested: str | None) -> str:
        return requested or self.params.namespace

    def limit(self, requested: int | None) -> int:
        return requested or self.params.max_context

    def store(self, session: Session, user_id: str, request: LgmStore, *, reading: Reading | None = None) -> LgmStored:
        """Store a node's memory and, unless told otherwise (`reflective`, OM_LG_REFLECTIVE), an automatic
        reflection of it in the `reflect` node (not for a reflection itself)."""
        node = lgm.node_name(request.node_or(None))
        namespace = self.namespace(request.namespace)
        memory = self._store(
            session,
            user_id,
            node,
            request.content,
            namespace,
            request.graph_id,
            tags=request.tags,
            metadata=request.metadata,
            reading=reading,
        )
        wanted = self.params.reflective if request.reflective is None else request.reflective
        reflection = None
        if wanted and node != lgm.REFLECT:
            reflection = self._store(
                session,
                user_id,
                lgm.REFLECT,
                lgm.auto_reflection(node, namespace, request.graph_id, request.content),
                namespace,
                request.graph_id,
                tags=["lgm:auto:reflection", f"lgm:source:{memory.id}"],
                metadata={},
                source_memory=str(memory.id),
                source_node=node,
                reading=reading,
            )
        return LgmStored(memory=memory, reflection=reflection)

    def _store(
        self,
        session: Session,
        user_id: str,
        node: str,
        content: str,
        namespace: str,
        graph_id: str | None,
        *,
        tags: Sequence[str],
        metadata: Mapping[str, Any],
        reading: Reading | None = None,
        **extra: Any,
    ) -> LgmMemory:
        classified = sector_rules.classify(normalize_content(content))
        item = MemoryCreate(
            content=content,
            tags=lgm.node_tags(tags, node, namespace, graph_id),
            metadata=lgm.node_metadata(metadata, node, namespace, graph_id, datetime.now(UTC), **extra),
        )
        sectors = lgm.node_sectors(node, classified.sectors)
        row, deduplicated = self.engine.add(
            session, user_id, item, classified=(sectors, classified.confidence), reading=reading
        )
        return LgmMemory(
            id=row["id"],
            node=lgm.stored_node(row["metadata"], row["primary_sector"]),
            primary_sector=row["primary_sector"],
            sectors=row["sectors"],
            namespace=namespace,
            graph_id=graph_id,
            tags=row["tags"],
            metadata=row["metadata"],
            deduplicated=deduplicated,
        )

    def recent(
        self,
        session: Session,
        user_id: str,
        node: str,
        namespace: str,
        graph_id: str | None,
        limit: int,
        *,
        include_metadata: bool,
    ) -> list[LgmItem]:
        """The node's newest memories in the namespace (and graph): those whose primary sector is the node's, the
        most recently seen first (OpenMemory reads four times the limit, newest first, and keeps those in scope)."""
        sector = lgm.node_sector(node)
        where = MemoryFilter(sectors=[sector], tags=lgm.scope_tags(namespace, graph_id))
        rows, _ = memory_store.list_memories(session, user_id, offset=0, limit=limit * 4, where=where)
        kept = [r for r in rows if r["primary_sector"] == sector and lgm.in_scope(r["metadata"], namespace, graph_id)]
        kept.sort(key=lambda r: r["last_seen_at"], reverse=True)
        return [item(r, include_metadata=include_metadata) for r in kept[:limit]]

    def context(self, session: Session, user_id: str, request: LgmContext) -> LgmContextResult:
        """Each node's newest memories in the namespace (and graph), a share of the limit each, and their summary."""
        namespace, limit = self.namespace(request.namespace), self.limit(request.limit)
        share = lgm.per_node_limit(limit)
        nodes = [
            LgmNodeContext(
                node=node,
                sector=sector,
                items=self.recent(session, user_id, node, namespace, request.graph_id, share, include_metadata=True),
            )
            for node, sector in lgm.NODE_SECTORS.items()
        ]
        return LgmContextResult(
            namespace=namespace,
            graph_id=request.graph_id,
            limit=limit,
            nodes=nodes,
            summary=lgm.context_summary(_lines(nodes), limit),
        )

    def reflect(self, session: Session, user_id: str, request: LgmReflection) -> LgmStored:
        """Store a reflection: the request's content, or one extracted from the namespace's (or graph's) context."""
        namespace = self.namespace(request.namespace)
        content = request.content
        if content is None:
            limit = self.params.max_context
            context = self.context(
                session, user_id, LgmContext(namespace=namespace, graph_id=request.graph_id, limit=limit)
            )
            content = lgm.reflection(_lines(context.nodes), namespace, request.graph_id, limit)
        if content is None:
            scope = f"namespace {namespace!r}" + (f", graph {request.graph_id!r}" if request.graph_id else "")
            raise InvalidInput(
                f"no reflection can be drawn: {scope} has no memories yet; store some first or send `content`"
            )
        stored = self.store(
            session,
            user_id,
            LgmStore(
                node=request.node_or(lgm.REFLECT),
                content=content,
                namespace=namespace,
                graph_id=request.graph_id,
                tags=["lgm:manual:reflection", *(f"lgm:context:{i}" for i in request.context_ids)],
                metadata={"lgm_context_ids": [str(i) for i in request.context_ids]},
                reflective=False,
            ),
        )
        return stored


def item(
    row: Mapping[str, Any], *, include_metadata: bool, score: float | None = None, path: Iterable[str] | None = None
) -> LgmItem:
    """A memory row as `/lgm` returns it."""
    return LgmItem(
        id=row["id"],
        node=lgm.stored_node(row["metadata"], row["primary_sector"]),
        content=row["content"],
        primary_sector=row["primary_sector"],
        sectors=row["sectors"],
        tags=row["tags"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        last_seen_at=row["last_seen_at"],
        salience=round(float(row["salience"]), 6),  # stored as `real`: no float32 noise in the answer
        decay_lambda=round(float(row["decay_lambda"]), 6),
        score=score,
        path=list(path) if path is not None else None,
        metadata=row["metadata"] if include_metadata else None,
    )


def found(
    matches: Iterable[tuple[uuid.UUID, float, Sequence[str], Mapping[str, Any]]],
    namespace: str,
    graph_id: str | None,
    limit: int,
    *,
    include_metadata: bool,
) -> list[LgmItem]:
    """What a query found (id, score, path, row), kept to the namespace (and graph) and the limit, best first."""
    kept = [
        item(row, include_metadata=include_metadata, score=score, path=[str(p) for p in path])
        for _, score, path, row in matches
        if lgm.in_scope(row["metadata"], namespace, graph_id)
    ]
    return kept[:limit]


def _lines(nodes: Sequence[LgmNodeContext]) -> list[tuple[str, str]]:
    return [(entry.node, i.content) for entry in nodes for i in entry.items]
