"""A read statement as named parts: common table expressions, each built by a function of its own, and the
`SELECT` that reads them, put together by `compose` instead of by editing another statement's text."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_NAME = re.compile(r"[a-z_][a-z0-9_]*")


@dataclass(frozen=True, slots=True)
class Cte:
    """`name AS [MATERIALIZED] (body)`: `materialized` where the planner must compute it once, as written."""

    name: str
    body: str
    materialized: bool = False

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"not a plain lower-case SQL name: {self.name!r}")

    def sql(self) -> str:
        return f"{self.name} AS {'MATERIALIZED ' if self.materialized else ''}({self.body})"


def compose(ctes: Sequence[Cte], select: str) -> str:
    """`WITH` the parts, in order (a part reads only those before it), then `select`; a name given twice is an
    error, not a part silently shadowed."""
    seen: set[str] = set()
    for cte in ctes:
        if cte.name in seen:
            raise ValueError(f"two parts of one statement are named {cte.name!r}")
        seen.add(cte.name)
    if not ctes:
        return select
    return "WITH " + ",\n".join(cte.sql() for cte in ctes) + "\n" + select
