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


def pairs(value: object, setting: str, shape: str) -> object:
    """'a=b,c=d' from the environment as {'a': 'b', 'c': 'd'}; anything else unchanged."""
    if not isinstance(value, str):
        return value
    parsed: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in value.split(","))):
        left, sep, right = (p.strip() for p in entry.partition("="))
        if not sep or not left or not right:
            raise ValueError(f"{setting} entry {entry!r} must look like {shape!r}")
        parsed[left] = right
    return parsed
