"""The REST API's vocabulary and its shared validation: sectors, tenants, tags, metadata, times.

Every module of `shared.api` imports nothing but pydantic and the standard library, so a client package can
ship these schemas as they are (tests/unit/test_architecture.py keeps it so).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, WithJsonSchema, field_validator

# The five sectors (the architecture seed's), in this order everywhere.
SECTORS: tuple[str, ...] = ("episodic", "semantic", "procedural", "emotional", "reflective")
# The embedding providers a store's vectors can come from.
Provider = Literal["synthetic", "local", "static", "openai", "ollama"]

# A user id becomes a key prefix in Redis, a label on /metrics and a value in every row: a short plain name. A
# leading "_" is reserved for the store's own names ("_system" owns store-wide jobs, "_other" on /metrics).
USER_ID_MAX_CHARS = 256
USER_ID_PATTERN = r"^[A-Za-z0-9.@:-][A-Za-z0-9_.@:-]{0,255}$"
USER_ID_RULE = "1-256 characters of letters (A-Z, a-z), digits and - _ . @ :, not starting with _ (reserved)"
_USER_ID = re.compile(USER_ID_PATTERN, re.ASCII)


def check_user_id(value: str) -> str:
    """`value` if it is a user id a tenant may use, else ValueError saying what is allowed."""
    if _USER_ID.fullmatch(value):
        return value
    shown = f"{len(value):,} characters" if len(value) > USER_ID_MAX_CHARS else repr(value)
    raise ValueError(f"a user_id is {USER_ID_RULE}; got {shown}")


UserId = Annotated[
    str,
    AfterValidator(check_user_id),
    WithJsonSchema(
        {"type": "string", "pattern": USER_ID_PATTERN, "minLength": 1, "maxLength": USER_ID_MAX_CHARS},
        mode="validation",
    ),
]


# Salience, confidence, a link's weight, a boost and a decay ratio are stored as PostgreSQL `real` (32-bit floats),
# which refuses a non-zero number too small for it (5e-324, say) with an underflow error instead of storing 0.
REAL_SMALLEST = 1e-38


def storable_real(value: float) -> float:
    """`value` if PostgreSQL can store it as `real`: 0, or at least REAL_SMALLEST in magnitude; else ValueError."""
    if value != 0.0 and abs(value) < REAL_SMALLEST:
        raise ValueError(
            f"{value!r} is too small to store as a 32-bit float; the smallest magnitude taken is {REAL_SMALLEST:g}"
        )
    return value


Real = Annotated[float, AfterValidator(storable_real)]


# The largest offset a paginated route takes: far past any page a store has, and inside PostgreSQL's integers
# (OFFSET is a bigint; a larger number was an out-of-range error, a 500).
MAX_OFFSET = 2**31 - 1


def no_nul(value: str, what: str) -> str:
    # PostgreSQL text and jsonb cannot hold U+0000: refuse it here rather than fail in the database.
    if "\x00" in value:
        raise ValueError(f"{what} contains a NUL character (U+0000), which cannot be stored")
    return value


def clean_tags(tags: list[str]) -> list[str]:
    seen: dict[str, None] = {}
    for tag in tags:
        tag = no_nul(tag.strip(), "a tag")
        if not tag:
            raise ValueError("tags must not be empty strings")
        seen.setdefault(tag, None)
    return list(seen)


def tag_filter(value: list[str] | None) -> list[str] | None:
    """Tags to filter by, as given; one with a NUL (no stored tag can have it) is refused rather than sent to the
    database, where it failed the query."""
    for tag in value or []:
        no_nul(tag, "a tag")
    return value


def known_sectors(value: list[str] | None) -> list[str] | None:
    for sector in value or []:
        if sector not in SECTORS:
            raise ValueError(f"unknown sector {sector!r}; expected one of {', '.join(SECTORS)}")
    return value


def contains_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(contains_nul(k) or contains_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(contains_nul(v) for v in value)
    return False


def clean_metadata(value: dict[str, Any]) -> dict[str, Any]:
    if contains_nul(value):
        raise ValueError("metadata contains a NUL character (U+0000), which cannot be stored")
    return value


class TagsAndMetadata(BaseModel):
    """Validation of `tags` and `metadata`, shared by the models that carry them."""

    @field_validator("tags", check_fields=False)
    @classmethod
    def _tags(cls, value: list[str]) -> list[str]:
        return clean_tags(value)

    @field_validator("metadata", check_fields=False)
    @classmethod
    def _metadata(cls, value: dict[str, Any]) -> dict[str, Any]:
        return clean_metadata(value)


# PostgreSQL's timestamptz takes a UTC offset below 16 hours; ISO 8601 (and Python) allow up to 23:59.
PG_MAX_OFFSET = timedelta(hours=16)


def assume_utc(value: datetime | None) -> datetime | None:
    """A time without a zone is UTC; one whose offset PostgreSQL cannot take is the same instant in UTC (it was an
    error in the database, a 500). ValueError for an instant outside the years 1 to 9999 in UTC, which PostgreSQL
    would store but Python could not read back."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        utc = value.astimezone(UTC)
    except OverflowError as exc:
        raise ValueError(f"{value.isoformat()} is outside the years 1 to 9999 in UTC") from exc
    offset = value.utcoffset()
    return utc if offset is not None and abs(offset) >= PG_MAX_OFFSET else value
