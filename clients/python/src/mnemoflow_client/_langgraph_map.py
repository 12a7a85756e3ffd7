"""How a LangGraph store item is one Mnemoflow memory (the mapping `langgraph.MnemoflowStore` writes and reads): its
tags, its content, its metadata, and the value filters and namespace conditions applied to what comes back. Pure."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import Item, MatchCondition, SearchItem, get_text_at_path

# Every memory the store writes carries this tag, so "the whole store" (an empty namespace prefix) is a tag filter
# too; LangGraph refuses "langgraph" as a namespace's first label, but a tenant's own memories could use that word.
STORE_TAG = "langgraph-store"
NAMESPACE_TAG = "lg:ns:"
ITEM_TAG = "lg:item:"
# The metadata key holding the item: {"namespace": [...], "key": ..., "value": {...}, "created_at", "updated_at"}.
METADATA_KEY = "langgraph"
WHOLE_VALUE = "$"


def _digest(*parts: Any) -> str:
    # JSON keeps ("a/b",) and ("a", "b") apart; 20 hex digits (80 bits) name an item among any tenant's items.
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()[:20]


def namespace_tag(namespace: Sequence[str]) -> str:
    """The tag every item whose namespace starts with `namespace` carries (the store's tag for the empty one)."""
    return f"{NAMESPACE_TAG}{_digest(*namespace)}" if namespace else STORE_TAG


def item_tag(namespace: Sequence[str], key: str) -> str:
    """The tag only the item `key` of `namespace` carries."""
    return f"{ITEM_TAG}{_digest(list(namespace), key)}"


def item_tags(namespace: Sequence[str], key: str) -> list[str]:
    """An item's tags: the store's, one per prefix of its namespace (what `search` filters on), and its own."""
    prefixes = [namespace_tag(namespace[:depth]) for depth in range(1, len(namespace) + 1)]
    return [STORE_TAG, *prefixes, item_tag(namespace, key)]


def literal_prefix(path: Sequence[str]) -> tuple[str, ...]:
    """The labels of a prefix condition before its first wildcard: what a tag can narrow a listing to."""
    labels: list[str] = []
    for label in path:
        if label == "*":
            break
        labels.append(label)
    return tuple(labels)


def render_value(value: Mapping[str, Any], fields: Sequence[str] | None) -> str:
    """The searchable text of a value: each top-level field as `name: value` (the whole value, `$`), or the text at
    each of `fields` (LangGraph's paths: `a.b`, `list[*].text`, ...), a line each; none for no fields."""
    lines: list[str] = []
    for field in [WHOLE_VALUE] if fields is None else fields:
        if field == WHOLE_VALUE:
            for name, inner in value.items():
                shown = inner if isinstance(inner, str) else json.dumps(inner, ensure_ascii=False, sort_keys=True)
                lines.append(f"{name}: {shown}")
        else:
            lines.extend(text for text in get_text_at_path(dict(value), field) if text.strip())
    return "\n".join(lines)


def content_for(namespace: Sequence[str], key: str, text: str, *, disambiguate: bool = False) -> str:
    """A memory's content: a first line naming the item, then the value's text. `disambiguate` adds the item's
    digest, for the rare content the tenant already has under another memory (the store deduplicates contents)."""
    head = f"[{'/'.join(namespace)}] {key}"
    if disambiguate:
        head += f" ({item_tag(namespace, key)})"
    return f"{head}\n{text}" if text.strip() else head


def metadata_for(
    namespace: Sequence[str], key: str, value: Mapping[str, Any], created_at: datetime, updated_at: datetime
) -> dict[str, Any]:
    """The memory's metadata: the item, whole."""
    return {
        METADATA_KEY: {
            "namespace": list(namespace),
            "key": key,
            "value": dict(value),
            "created_at": created_at.isoformat(),
            "updated_at": updated_at.isoformat(),
        }
    }


@dataclass(frozen=True)
class Stored:
    """An item as read back from a memory's metadata."""

    memory_id: str
    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime

    def item(self) -> Item:
        return Item(
            value=self.value,
            key=self.key,
            namespace=self.namespace,
            created_at=self.created_at,
            updated_at=self.updated_at,
        )

    def search_item(self, score: float | None = None) -> SearchItem:
        return SearchItem(self.namespace, self.key, self.value, self.created_at, self.updated_at, score)


def _when(text: Any, fallback: datetime) -> datetime:
    if not isinstance(text, str):
        return fallback
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return fallback
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def stored_item(memory_id: Any, metadata: Mapping[str, Any], fallback_time: datetime) -> Stored | None:
    """The item a memory holds, or None for a memory the store did not write (or whose metadata was changed into
    something else)."""
    entry = metadata.get(METADATA_KEY)
    if not isinstance(entry, dict):
        return None
    namespace, key, value = entry.get("namespace"), entry.get("key"), entry.get("value")
    if not isinstance(namespace, list) or not all(isinstance(label, str) for label in namespace):
        return None
    if not isinstance(key, str) or not isinstance(value, dict):
        return None
    return Stored(
        memory_id=str(memory_id),
        namespace=tuple(namespace),
        key=key,
        value=value,
        created_at=_when(entry.get("created_at"), fallback_time),
        updated_at=_when(entry.get("updated_at"), fallback_time),
    )


def under(namespace: tuple[str, ...], prefix: tuple[str, ...]) -> bool:
    return namespace[: len(prefix)] == prefix


def value_matches(value: Mapping[str, Any], conditions: Mapping[str, Any] | None) -> bool:
    """Whether a value passes a search's filter, as LangGraph's own stores read one: each field equal to what is
    given (a dict compares field by field, a list element by element), or passing `$eq`, `$ne`, `$gt`, `$gte`,
    `$lt`, `$lte`."""
    return all(_compare(value.get(name), wanted) for name, wanted in (conditions or {}).items())


def _compare(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        if any(name.startswith("$") for name in wanted):
            return all(_operator(actual, name, operand) for name, operand in wanted.items())
        return isinstance(actual, dict) and all(_compare(actual.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(actual, list | tuple)
            and len(actual) == len(wanted)
            and all(_compare(a, w) for a, w in zip(actual, wanted, strict=True))
        )
    return bool(actual == wanted)


def _operator(actual: Any, name: str, operand: Any) -> bool:
    if name == "$eq":
        return bool(actual == operand)
    if name == "$ne":
        return bool(actual != operand)
    if name not in ("$gt", "$gte", "$lt", "$lte"):
        raise ValueError(f"unsupported filter operator {name!r}; use $eq, $ne, $gt, $gte, $lt or $lte")
    try:
        left, right = float(actual), float(operand)
    except (TypeError, ValueError):
        return False  # a missing or non-numeric field is not greater or less than anything
    return {"$gt": left > right, "$gte": left >= right, "$lt": left < right, "$lte": left <= right}[name]


def namespace_matches(namespace: tuple[str, ...], condition: MatchCondition) -> bool:
    """Whether a namespace passes one of `list_namespaces`' conditions (`*` matches any one label)."""
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise ValueError(f"unsupported match type {condition.match_type!r}; use prefix or suffix")
    return all(wanted in ("*", label) for label, wanted in pairs)
