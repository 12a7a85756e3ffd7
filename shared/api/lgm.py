"""OpenMemory's LangGraph memory, `/lgm/*`: a graph node's memories, stored and read in a namespace (and a graph).

Field names are OpenMemory's server's (`node`, `limit`); its JavaScript SDK's types say `node_id` and `k`, so both
are taken. Without a `namespace`, OpenMemory's default one (OM_LG_NAMESPACE) is meant.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from .common import TagsAndMetadata, UserId, no_nul
from .memories import memory_text
from .query import MAX_QUERY_CHARS

# A node, namespace or graph id becomes a tag (`lgm:namespace:<ns>`): short, one line, not blank.
NAME_MAX_CHARS = 128
MAX_LIMIT = 1000


def scope_name(value: str) -> str:
    value = no_nul(value, "a node, namespace or graph_id").strip()
    if not value:
        raise ValueError("must not be blank")
    if any(c in value for c in "\r\n"):
        raise ValueError("must be one line")
    return value


Name = Annotated[str, Field(min_length=1, max_length=NAME_MAX_CHARS), AfterValidator(scope_name)]


class _Node(BaseModel):
    """`node` (OpenMemory's server) or `node_id` (its SDK's types): the same thing, the two may not disagree."""

    model_config = ConfigDict(extra="forbid")

    node: Name | None = Field(default=None, description="the graph node: observe, plan, reflect, act, emotion, ...")
    node_id: Name | None = Field(default=None, description="the same as `node` (OpenMemory's SDK sends this name)")

    @model_validator(mode="after")
    def _one_node(self) -> _Node:
        if self.node and self.node_id and self.node.lower() != self.node_id.lower():
            raise ValueError(f"node {self.node!r} and node_id {self.node_id!r} disagree: send one of them")
        self.node = self.node or self.node_id
        return self

    def node_or(self, default: str | None) -> str:
        """The node named, else `default`; a route whose node is required passes None and gets a clear 422."""
        if self.node:
            return self.node
        if default is None:
            raise ValueError("node (or node_id) is required")
        return default


class _Scope(_Node):
    namespace: Name | None = Field(default=None, description="default: OM_LG_NAMESPACE ('default')")
    graph_id: Name | None = Field(default=None, description="one graph of the namespace; default: all of it")
    user_id: UserId | None = None


class LgmStore(_Scope, TagsAndMetadata):
    """`POST /lgm/store`: a node's memory, in its node's sector, scoped to the namespace (and graph)."""

    content: str = Field(min_length=1)
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    reflective: bool | None = Field(
        default=None, description="also store an automatic reflection of it; default OM_LG_REFLECTIVE (true)"
    )

    _content = field_validator("content")(lambda cls, value: memory_text(value))

    @model_validator(mode="after")
    def _needs_node(self) -> LgmStore:
        self.node_or(None)
        return self


class LgmRetrieve(_Scope):
    """`POST /lgm/retrieve`: a node's memories in the namespace: those matching `query`, else the newest."""

    query: str | None = Field(default=None, max_length=MAX_QUERY_CHARS)
    limit: int | None = Field(default=None, ge=1, le=MAX_LIMIT, description="default OM_LG_MAX_CONTEXT (50)")
    k: int | None = Field(default=None, ge=1, le=MAX_LIMIT, description="the same as `limit` (the SDK's name)")
    include_metadata: bool = False

    _query = field_validator("query")(lambda cls, value: None if value is None else no_nul(value, "query"))

    @model_validator(mode="after")
    def _needs_node(self) -> LgmRetrieve:
        self.node_or(None)
        if self.limit and self.k and self.limit != self.k:
            raise ValueError(f"limit {self.limit} and k {self.k} disagree: send one of them")
        return self


class LgmContext(_Scope):
    """`POST /lgm/context`: the namespace's (or graph's) newest memories of every node, grouped by node and sector.
    A `node` is taken (the SDK sends one) and, as in OpenMemory, changes nothing: a context covers every node."""

    limit: int | None = Field(default=None, ge=1, le=MAX_LIMIT, description="default OM_LG_MAX_CONTEXT (50)")


class LgmReflection(_Scope):
    """`POST /lgm/reflection`: store a reflection (node `reflect` unless named): `content`, or one extracted from
    the namespace's (or graph's) context when there is none."""

    content: str | None = Field(default=None, min_length=1)
    context_ids: list[uuid.UUID] = Field(default_factory=list, max_length=100)

    _content = field_validator("content")(lambda cls, value: None if value is None else memory_text(value))


class LgmMemory(BaseModel):
    """A node's memory as stored."""

    id: uuid.UUID
    node: str
    primary_sector: str
    sectors: list[str]
    namespace: str
    graph_id: str | None
    tags: list[str]
    chunks: int = 1
    metadata: dict[str, Any]
    deduplicated: bool = False


class LgmStored(BaseModel):
    memory: LgmMemory
    reflection: LgmMemory | None = Field(description="the automatic reflection, when one was stored")


class LgmItem(BaseModel):
    """A node's memory as retrieved; `score` and `path` when a query found it, `metadata` when asked for."""

    id: uuid.UUID
    node: str
    content: str
    primary_sector: str
    sectors: list[str]
    tags: list[str]
    created_at: datetime
    updated_at: datetime
    last_seen_at: datetime
    salience: float
    decay_lambda: float
    score: float | None = None
    path: list[str] | None = None
    metadata: dict[str, Any] | None = None


class LgmRetrieved(BaseModel):
    node: str
    sector: str
    namespace: str
    graph_id: str | None
    query: str | None
    count: int
    items: list[LgmItem]


class LgmNodeContext(BaseModel):
    node: str
    sector: str
    items: list[LgmItem]


class LgmContextResult(BaseModel):
    namespace: str
    graph_id: str | None
    limit: int
    nodes: list[LgmNodeContext] = Field(description="each node's newest memories, with the node's sector")
    summary: str = Field(description="one `- [node] content` line per memory")


class LgmConfig(BaseModel):
    """`GET /lgm/config`: OpenMemory's LangGraph configuration."""

    mode: str
    namespace_default: str
    max_context: int
    reflective: bool
    node_sector_map: dict[str, str]
