"""How settings are read from the environment: names, "a=b,c=d" pairs, database URLs."""

from __future__ import annotations

from pydantic import AliasChoices


def env(*names: str) -> AliasChoices:
    """Accept Mnemoflow's own name first, then OpenMemory's, so an OpenMemory config carries over."""
    return AliasChoices(*names)


def normalize_database_url(url: str) -> str:
    """Point any PostgreSQL DSN at the psycopg 3 driver."""
    for prefix in ("postgres://", "postgresql://", "postgresql+psycopg2://", "postgresql+asyncpg://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def pairs(value: object, setting: str, shape: str, *, secret: bool = False) -> object:
    """'a=b,c=d' from the environment as {'a': 'b', 'c': 'd'}; anything else unchanged. A left side given twice is
    refused (the last would win silently). `secret`: the left sides are keys, never repeated in a message."""
    if not isinstance(value, str):
        return value
    parsed: dict[str, str] = {}
    for number, entry in enumerate(filter(None, (part.strip() for part in value.split(","))), start=1):
        left, sep, right = (p.strip() for p in entry.partition("="))
        shown = f"entry {number}" if secret else f"entry {entry!r}"
        if not sep or not left or not right:
            raise ValueError(f"{setting} {shown} must look like {shape!r}")
        if left in parsed:
            raise ValueError(f"{setting} {shown} repeats the left side of an earlier entry: each may appear once")
        parsed[left] = right
    return parsed
