"""The items of a bulk load (`mnemoflow batch`), read a record at a time from JSONL or CSV, checked against the
batch route's own item schema, cut into batches, each with an idempotency key of its own.

JSONL: one JSON object per line with a batch item's fields (`content` required; `tags`, `metadata`, `occurred_at`,
`salience`, `confidence`, `user_id`), or a JSON string (its content). CSV: a header row with a `content` column;
`tags` (separated by commas or semicolons), `metadata` (a JSON object), `occurred_at`, `salience`, `confidence` and
`user_id` columns are the item's fields, any other column goes into its metadata under its name.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Literal

from mnemoflow_client.schemas.memories import MemoryCreate
from pydantic import ValidationError

Format = Literal["jsonl", "csv"]
ITEM_FIELDS = tuple(MemoryCreate.model_fields)
_CSV_FIELDS = {"content", "tags", "metadata", "occurred_at", "salience", "confidence", "user_id"}
# The server classifies each memory's sector from its content; a field that looks like it sets one is refused.
_SECTOR_FIELDS = {"sector", "primary_sector", "sectors"}
_TAG_SEPARATORS = re.compile(r"[,;]")


class BadRecord(ValueError):
    """A record that is not a batch item: where it starts (line number, from 1) and why."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


@dataclass(frozen=True)
class Defaults:
    """What the command line adds to every item: tags, and the tenant an item may not differ from."""

    tags: tuple[str, ...] = ()
    user_id: str | None = None


def file_format(path: Path, given: str | None = None) -> Format:
    """The format `given`, else the file's suffix's (.jsonl/.ndjson/.json: JSONL, .csv/.tsv: CSV)."""
    name = (given or path.suffix.lstrip(".")).lower()
    if name in ("jsonl", "ndjson", "json"):
        return "jsonl"
    if name in ("csv", "tsv"):
        return "csv"
    raise ValueError(f"cannot tell the format of {path.name}: name it .jsonl or .csv, or pass --format jsonl|csv")


def records(path: Path, fmt: Format) -> Iterator[tuple[int, Any]]:
    """(line number, raw record) of each record in the file, streamed: a decoded JSON value for JSONL (BadRecord
    for a line that is not JSON), a dict of column → cell for CSV (BadRecord for a header without `content`)."""
    if fmt == "jsonl":
        with path.open(encoding="utf-8-sig") as lines:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    yield number, json.loads(line)
                except json.JSONDecodeError as exc:
                    yield number, BadRecord(number, f"not valid JSON ({exc.msg} at column {exc.colno})")
        return
    with path.open(encoding="utf-8-sig", newline="") as text:
        delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
        reader = csv.DictReader(text, delimiter=delimiter)
        header = reader.fieldnames or []
        if "content" not in header:
            raise BadRecord(1, f"the header row has no `content` column (it has: {', '.join(header) or 'nothing'})")
        if refused := _SECTOR_FIELDS.intersection(header):
            raise BadRecord(1, _sector_refusal(sorted(refused)[0]))
        start = reader.line_num + 1
        for row in reader:
            yield start, row
            start = reader.line_num + 1


def _sector_refusal(name: str) -> str:
    return (
        f"`{name}`: the server classifies each memory's sector from its content, a batch item cannot set it "
        "(rename the column or field to keep it in metadata)"
    )


def _from_csv(row: dict[str | None, Any]) -> dict[str, Any]:
    if None in row:
        raise ValueError(f"{len(row[None])} more cells than the header has columns")
    item: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    for column, cell in row.items():
        if column is None or cell is None or cell == "":
            continue
        if column == "tags":
            item["tags"] = [tag.strip() for tag in _TAG_SEPARATORS.split(cell) if tag.strip()]
        elif column == "metadata":
            try:
                metadata.update(json.loads(cell))
            except (json.JSONDecodeError, TypeError, ValueError) as exc:
                raise ValueError(f"metadata: not a JSON object ({exc})") from exc
        elif column in _CSV_FIELDS:
            item[column] = cell
        else:
            metadata[column] = cell
    if metadata:
        item["metadata"] = metadata
    return item


def to_item(record: Any, fmt: Format, defaults: Defaults) -> dict[str, Any]:
    """The batch item a record is, checked by the route's own schema (MemoryCreate) and dumped as it will be sent;
    ValueError saying what is wrong."""
    if isinstance(record, BadRecord):
        raise ValueError(record.reason)
    if fmt == "csv":
        record = _from_csv(record)
    elif isinstance(record, str):
        record = {"content": record}
    elif not isinstance(record, dict):
        raise ValueError(f"a line must hold a JSON object (or a string), not {type(record).__name__}")
    if refused := _SECTOR_FIELDS.intersection(record):
        raise ValueError(_sector_refusal(sorted(refused)[0]))
    if unknown := sorted(set(record) - set(ITEM_FIELDS)):
        raise ValueError(f"unknown field {unknown[0]!r}; an item has {', '.join(ITEM_FIELDS)}")
    if defaults.tags and isinstance(record.get("tags") or [], list):
        record = {**record, "tags": [*(record.get("tags") or []), *defaults.tags]}
    try:
        item = MemoryCreate.model_validate(record)
    except ValidationError as exc:
        raise ValueError(_validation_message(exc)) from None
    if item.user_id is not None and item.user_id != defaults.user_id:
        raise ValueError(
            f"user_id {item.user_id!r} is not the batch's ({defaults.user_id!r}, --user-id): one load writes for one "
            "tenant"
        )
    return item.model_dump(mode="json", exclude_defaults=True, exclude={"user_id"})


def _validation_message(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors()[:3]:
        where = ".".join(str(part) for part in error["loc"]) or "item"
        problems.append(f"{where}: {error['msg']}")
    return "; ".join(problems)


@dataclass(frozen=True)
class Checked:
    """What a first pass over a file found: how many records are items, and the bad ones (the first 100)."""

    items: int
    bad: list[BadRecord]
    bad_count: int


def check(
    path: Path, fmt: Format, defaults: Defaults, keep: int = 100, seen: Callable[[int], None] | None = None
) -> Checked:
    """Read every record once, keeping nothing but the count and the first `keep` bad records; `seen(n)` is told
    the count every thousand records."""
    items = bad_count = 0
    bad: list[BadRecord] = []
    for count, (line, record) in enumerate(records(path, fmt), start=1):
        if seen is not None and count % 1000 == 0:
            seen(count)
        try:
            to_item(record, fmt, defaults)
            items += 1
        except ValueError as exc:
            bad_count += 1
            if len(bad) < keep:
                bad.append(BadRecord(line, str(exc)))
    return Checked(items, bad, bad_count)


def items(path: Path, fmt: Format, defaults: Defaults) -> Iterator[dict[str, Any]]:
    """The file's items in order, bad records left out (`check` reports them)."""
    for _, record in records(path, fmt):
        try:
            yield to_item(record, fmt, defaults)
        except ValueError:
            continue


def batches(stream: Iterator[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    """The items cut into lists of `size` (the last one shorter), read lazily."""
    while batch := list(islice(stream, size)):
        yield batch


def batch_key(position: int, items: Sequence[dict[str, Any]], *, sequence: bool) -> str:
    """The idempotency key of the batch at `position` (from 0): its place and a digest of exactly what it sends, so
    a load run again sends the same keys with the same batches (the gateway answers their first jobs and stores
    nothing twice), while a changed batch gets a new key rather than a conflict."""
    encoded = json.dumps([position, sequence, list(items)], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return f"mnemoflow-batch-{position}-{hashlib.sha256(encoded.encode()).hexdigest()[:40]}"
