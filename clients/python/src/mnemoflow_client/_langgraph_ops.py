"""LangGraph's store operations as Mnemoflow calls, written once for both clients: each operation is a generator
that yields the client calls it needs (`Step`s), is sent their answers (or has their errors thrown in), and returns
the operation's result. `langgraph.MnemoflowStore` drives them with `Mnemoflow` or, awaited, `AsyncMnemoflow`."""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import GetOp, ListNamespacesOp, PutOp, SearchItem, SearchOp

from . import _langgraph_map as mapping
from .errors import Conflict, NotFound

# The most memories one listing answers (`GET /memory/all`'s limit).
LIST_PAGE_MAX = 1000
# How many memories carrying one item's tag are read: one, or a few after two puts raced.
ITEM_COPIES = 20


@dataclass(frozen=True)
class Step:
    """One client call: a method both clients have, and its keyword arguments."""

    method: str
    kwargs: dict[str, Any] = field(default_factory=dict)


Operation = Generator[Step, Any, Any]


@dataclass(frozen=True)
class Options:
    """What the store was made with (see `MnemoflowStore`)."""

    user_id: str | None = None
    index_fields: tuple[str, ...] | None = None
    min_score: float | None = 0.0
    min_evidence: float | None = 0.0
    max_k: int = 200
    page_size: int = 200


def _copies(namespace: tuple[str, ...], key: str, options: Options) -> Operation:
    """The memories holding item `key` of `namespace`, oldest first (one, unless puts raced)."""
    page = yield Step(
        "list_memories",
        {"tags": [mapping.item_tag(namespace, key)], "limit": ITEM_COPIES, "user_id": options.user_id},
    )
    found = []
    for memory in page.items:
        stored = mapping.stored_item(memory.id, memory.metadata, memory.created_at)
        if stored is not None and stored.namespace == namespace and stored.key == key:
            found.append((memory.created_at, stored))
    return [stored for _, stored in sorted(found, key=lambda pair: pair[0])]


def get(op: GetOp, options: Options) -> Operation:
    copies = yield from _copies(tuple(op.namespace), op.key, options)
    return copies[0].item() if copies else None


def put(op: PutOp, options: Options) -> Operation:
    """Write, replace or (a None value) delete an item: the same namespace and key is always one memory, changed in
    place (its id and `created_at` kept), so putting again, or after a failure, still leaves one memory."""
    namespace = tuple(op.namespace)
    copies = yield from _copies(namespace, op.key, options)
    if op.value is None:
        for stored in copies:
            yield from _delete(stored.memory_id, options)
        return None
    now = datetime.now(UTC)
    created = copies[0].created_at if copies else now
    fields = None if op.index is None else (op.index or [])  # index=False: nothing of the value is searchable
    text = mapping.render_value(op.value, fields if fields is not None else options.index_fields)
    body = {
        "tags": mapping.item_tags(namespace, op.key),
        "metadata": mapping.metadata_for(namespace, op.key, op.value, created, now),
        "user_id": options.user_id,
    }
    if copies:
        yield from _replace(copies[0].memory_id, namespace, op.key, text, body)
        for extra in copies[1:]:  # a put that raced this one's first add: one memory stays
            yield from _delete(extra.memory_id, options)
        return None
    yield from _add(namespace, op.key, text, body)
    return None


def _add(namespace: tuple[str, ...], key: str, text: str, body: dict[str, Any]) -> Operation:
    for disambiguate in (False, True):
        content = mapping.content_for(namespace, key, text, disambiguate=disambiguate)
        added = yield Step("add", {"content": content, **body})
        if not added.deduplicated:
            return None
        stored = mapping.stored_item(added.id, added.metadata, added.created_at)
        if stored is not None and (stored.namespace, stored.key) == (namespace, key):
            # The same item, added by a put that raced this one: this put's value goes in, the memory stays one.
            yield Step("update", {"memory_id": added.id, **body})
            return None
        # Another memory of the tenant has this exact content: the item's digest in its first line tells them apart.
    raise Conflict(f"the tenant already has a memory with the content of item {key!r}", code="conflict", status=409)


def _replace(memory_id: str, namespace: tuple[str, ...], key: str, text: str, body: dict[str, Any]) -> Operation:
    for disambiguate in (False, True):
        content = mapping.content_for(namespace, key, text, disambiguate=disambiguate)
        try:
            yield Step("update", {"memory_id": memory_id, "content": content, **body})
            return None
        except Conflict:
            if disambiguate:
                raise
        except NotFound:  # deleted meanwhile: the put still stores the value
            yield from _add(namespace, key, text, body)
            return None
    return None


def _delete(memory_id: str, options: Options) -> Operation:
    with contextlib.suppress(NotFound):  # already gone: deleting is done
        yield Step("delete", {"memory_id": memory_id, "user_id": options.user_id})
    return None


def search(op: SearchOp, options: Options) -> Operation:
    prefix = tuple(op.namespace_prefix)
    if op.limit <= 0:
        return []
    if op.query:
        return (yield from _ranked(op, prefix, options))
    return (yield from _listed(op, prefix, options))


def _ranked(op: SearchOp, prefix: tuple[str, ...], options: Options) -> Operation:
    """A search with a query: Mnemoflow's query over the memories tagged with the prefix, its scores kept. With a
    filter, more are asked for (doubling, up to `max_k`) until enough pass it or none are left."""
    wanted = op.offset + op.limit
    k = min(options.max_k, wanted if not op.filter else max(2 * wanted, 20))
    while True:
        answer = yield Step(
            "query",
            {
                "query": op.query,
                "k": k,
                "tags": [mapping.namespace_tag(prefix)],
                "min_score": options.min_score,
                "min_evidence": options.min_evidence,
                "reinforce": None if op.refresh_ttl else False,
                "user_id": options.user_id,
            },
        )
        found: list[SearchItem] = []
        for match in answer.matches:
            stored = mapping.stored_item(match.id, match.metadata, match.last_seen_at)
            if stored is None or not mapping.under(stored.namespace, prefix):
                continue
            if mapping.value_matches(stored.value, op.filter):
                found.append(stored.search_item(match.score))
        if len(found) >= wanted or len(answer.matches) < k or k >= options.max_k:
            return found[op.offset : wanted]
        k = min(options.max_k, 2 * k)


def _listed(op: SearchOp, prefix: tuple[str, ...], options: Options) -> Operation:
    """A search without a query: the memories tagged with the prefix, newest first. Without a filter the gateway
    pages; with one, pages are read until `offset + limit` items passed it."""
    server_offset, skip = (0, op.offset) if op.filter else (op.offset, 0)
    size = min(LIST_PAGE_MAX, max(op.limit, options.page_size) if op.filter else op.limit)
    found: list[SearchItem] = []
    while True:
        page = yield Step(
            "list_memories",
            {
                "tags": [mapping.namespace_tag(prefix)],
                "offset": server_offset,
                "limit": size,
                "user_id": options.user_id,
            },
        )
        for memory in page.items:
            stored = mapping.stored_item(memory.id, memory.metadata, memory.created_at)
            if stored is None or not mapping.under(stored.namespace, prefix):
                continue
            if not mapping.value_matches(stored.value, op.filter):
                continue
            if skip:
                skip -= 1
                continue
            found.append(stored.search_item())
            if len(found) == op.limit:
                return found
        server_offset += len(page.items)
        if not page.items or server_offset >= page.total:
            return found


def list_namespaces(op: ListNamespacesOp, options: Options) -> Operation:
    """The namespaces of the stored items that pass the conditions, cut to `max_depth`, sorted, paged. Reads every
    item under the longest prefix the conditions fix (the whole store without one)."""
    conditions = op.match_conditions or ()
    fixed: tuple[str, ...] = ()
    for condition in conditions:
        if condition.match_type == "prefix":
            literal = mapping.literal_prefix(condition.path)
            fixed = literal if len(literal) > len(fixed) else fixed
    namespaces: set[tuple[str, ...]] = set()
    offset = 0
    while True:
        page = yield Step(
            "list_memories",
            {
                "tags": [mapping.namespace_tag(fixed)],
                "offset": offset,
                "limit": LIST_PAGE_MAX,
                "user_id": options.user_id,
            },
        )
        for memory in page.items:
            stored = mapping.stored_item(memory.id, memory.metadata, memory.created_at)
            if stored is not None and all(mapping.namespace_matches(stored.namespace, c) for c in conditions):
                namespaces.add(stored.namespace if op.max_depth is None else stored.namespace[: op.max_depth])
        offset += len(page.items)
        if not page.items or offset >= page.total:
            break
    return sorted(namespaces)[op.offset : op.offset + op.limit]


def operation(op: Any, options: Options) -> Operation:
    """The generator that carries out one of LangGraph's ops."""
    if isinstance(op, GetOp):
        return get(op, options)
    if isinstance(op, PutOp):
        return put(op, options)
    if isinstance(op, SearchOp):
        return search(op, options)
    if isinstance(op, ListNamespacesOp):
        return list_namespaces(op, options)
    raise ValueError(f"unknown store operation {type(op).__name__}")


__all__ = ["Operation", "Options", "Step", "operation"]
