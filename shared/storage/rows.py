"""What a memory row is on the way in and out of storage: its columns, the rows to insert, the filters.

No SQL is run here: `MemoryFilter` writes a WHERE fragment for the modules that run it.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

MEMORY_COLUMNS = (
    "id, user_id, content, summary, primary_sector, sectors, tags, meta, salience, recall_lift, decay_lambda, "
    "coactivations, tier, status, confidence, compression, created_at, updated_at, last_seen_at, last_used_at, "
    "occurred_at, document_id, valid_to"
)
# `MemoryFilter`'s parameters, in the order the functions that run a filter of their own take them, and their types
FILTER_PARAMS = ("f_sectors", "f_tags", "f_start", "f_end", "f_occurred_after", "f_occurred_before")
_FILTER_TYPES = ("text[]", "text[]", "timestamptz", "timestamptz", "timestamptz", "timestamptz")


# A query returned the memory: salience + :boost (capped at 1), and what that added is recall lift too
# (shared.lifecycle.formulas.returned): the SET clause of query reinforcement and of regeneration on access
def returned_set(gain: str) -> str:
    """RETURNED_SET with the boost written as `gain` (an SQL expression: a parameter, or a column of a join)."""
    return (
        f"salience = LEAST(1.0, salience + {gain}), "
        f"recall_lift = LEAST(1.0, recall_lift + LEAST(1.0, salience + {gain}) - salience)"
    )


RETURNED_SET = returned_set(":boost")
# What scoring and filtering read (the read path's first fetch); the rest is the payload (`fetch_payloads`)
LEAN_FIELDS = (
    "id",
    "user_id",
    "primary_sector",
    "sectors",
    "tags",
    "salience",
    "recall_lift",
    "decay_lambda",
    "coactivations",
    "tier",
    "status",
    "confidence",
    "compression",
    "created_at",
    "updated_at",
    "last_seen_at",
    "last_used_at",
    "occurred_at",
    "version",
    "valid_to",
)


def lean_columns(alias: str) -> str:
    """The lean row's columns of the memory `alias`, qualified (the read path joins memories to its hits)."""
    return ", ".join(f"{alias}.{field}" for field in LEAN_FIELDS)


@dataclass(frozen=True)
class SectorVector:
    """One sector's vector of a memory (or of a query), with the model that made it."""

    model: str
    vector: np.ndarray


@dataclass(frozen=True)
class NewMemory:
    """A memory ready to insert: classified, hashed, with a vector per sector."""

    user_id: str
    content: str
    content_hash: str
    primary_sector: str
    sectors: tuple[str, ...]
    tags: tuple[str, ...]
    meta: dict[str, Any]
    salience: float
    decay_lambda: float
    confidence: float
    classification_confidence: float
    vectors: Mapping[str, SectorVector]  # one per sector of `sectors`
    document_id: uuid.UUID | None = None
    chunk_index: int | None = None
    occurred_at: datetime | None = None  # when what it records happened; None: when it is stored
    fact_hash: str | None = None  # one memory per fact (shared.text.fact_hash); None: exact duplicates only


@dataclass(frozen=True)
class StoredRef:
    id: uuid.UUID
    created: bool
    merged: bool = False  # an earlier memory holds the same fact in other words


def occurred_sql(alias: str) -> str:
    """When memory `alias` happened, in SQL: occurred_at, else when it was stored. Migration 0012 indexes
    exactly this expression (per tenant); a query spelled otherwise cannot use the index. A CASE, not COALESCE:
    under row-level security the planner uses an index only for conditions it knows cannot leak, and it does not
    know that of COALESCE (a period's search read every memory of the tenant)."""
    return f"CASE WHEN {alias}.occurred_at IS NULL THEN {alias}.created_at ELSE {alias}.occurred_at END"


def happened_at(row: Mapping[str, Any]) -> datetime:
    """When a memory row happened: its occurred_at, else when it was stored (what `occurred_sql` reads)."""
    return row["occurred_at"] or row["created_at"]


@dataclass
class MemoryFilter:
    """Row filters shared by listing and retrieval."""

    sectors: Sequence[str] | None = None
    tags: Sequence[str] | None = None
    start_time: datetime | None = None  # when it was stored (OpenMemory's startTime / endTime)
    end_time: datetime | None = None
    occurred_after: datetime | None = None  # when it happened: occurred_at, else when it was stored
    occurred_before: datetime | None = None
    # the versions current then: happened by then, and not superseded by then (valid_to later, or none)
    as_of: datetime | None = None
    extra_params: dict[str, Any] = field(default_factory=dict)

    def sql(self, alias: str = "m") -> tuple[str, dict[str, Any]]:
        """A SQL fragment (starting with AND, possibly empty) and its parameters.

        `as_of` is written as the bound on when a memory happened (with `occurred_before`, the earlier of the two),
        with the parameters every filter has (`FILTER_PARAMS`: the search functions take no others); its other half,
        `valid_to` after it, is checked on the rows read (`passes`): what it leaves out is only the versions already
        replaced by then, a few of the candidates."""
        clauses: list[str] = []
        params: dict[str, Any] = {}
        if self.sectors:
            clauses.append(f"{alias}.sectors && CAST(:f_sectors AS text[])")
            params["f_sectors"] = list(self.sectors)
        if self.tags:
            clauses.append(f"{alias}.tags @> CAST(:f_tags AS text[])")
            params["f_tags"] = list(self.tags)
        if self.start_time is not None:
            clauses.append(f"{alias}.created_at >= :f_start")
            params["f_start"] = self.start_time
        if self.end_time is not None:
            clauses.append(f"{alias}.created_at <= :f_end")
            params["f_end"] = self.end_time
        if self.occurred_after is not None:
            clauses.append(f"{occurred_sql(alias)} >= :f_occurred_after")
            params["f_occurred_after"] = self.occurred_after
        before = self.happened_before
        if before is not None:
            clauses.append(f"{occurred_sql(alias)} <= :f_occurred_before")
            params["f_occurred_before"] = before
        return "".join(f" AND {c}" for c in clauses), params

    @property
    def happened_before(self) -> datetime | None:
        """The latest a memory may have happened: `occurred_before` or `as_of`, the earlier."""
        bounds = [b for b in (self.occurred_before, self.as_of) if b is not None]
        return min(bounds) if bounds else None

    @property
    def active(self) -> bool:
        return bool(
            self.sectors
            or self.tags
            or self.start_time
            or self.end_time
            or self.occurred_after
            or self.occurred_before
            or self.as_of
        )

    def passes(self, row: dict[str, Any]) -> bool:
        """The same filters, on a row already read (a memory reached through a waypoint)."""
        if self.sectors and not set(self.sectors) & set(row["sectors"]):
            return False
        if self.tags and not set(self.tags) <= set(row["tags"]):
            return False
        stored, occurred = row["created_at"], happened_at(row)
        if (self.start_time and stored < self.start_time) or (self.end_time and stored > self.end_time):
            return False
        if self.as_of is not None and row.get("valid_to") is not None and row["valid_to"] <= self.as_of:
            return False
        before = self.happened_before
        return not ((self.occurred_after and occurred < self.occurred_after) or (before and occurred > before))


def row_to_dict(row: Any) -> dict[str, Any]:
    """A memory row (SQLAlchemy's, or a dict from `read_rows`) as the API names its fields."""
    data = dict(getattr(row, "_mapping", row))
    if "meta" in data:
        data["metadata"] = data.pop("meta") or {}
    return data


def filter_arguments(clause: str, params: dict[str, Any], *, first: int, name: str, suffix: str = "") -> str:
    """A `MemoryFilter` condition (`clause`, written with the filter's `:f_...` parameters, whose values are in
    `params`) for a function that runs it in a statement of its own (`mnemoflow_nearest`, `mnemoflow_fresh`,
    `mnemoflow_matching`): the text goes in as the parameter `name` with the values as that statement's `$first`
    onwards, the function's arguments after the text. Returns those arguments for the call (`, :name, ...`; empty
    without a condition) and puts the text in `params`. `suffix`: the values are in `params` as `f_...{suffix}`
    (a statement calling the function with several filters)."""
    if not clause:
        return ""
    params[name] = re.sub(r":(f_\w+)", lambda m: f"${first + FILTER_PARAMS.index(m.group(1))}", clause)
    arguments = [
        f"CAST(:{param}{suffix} AS {kind})" if f"{param}{suffix}" in params else f"CAST(NULL AS {kind})"
        for param, kind in zip(FILTER_PARAMS, _FILTER_TYPES, strict=True)
    ]
    return f", :{name}, {', '.join(arguments)}"
