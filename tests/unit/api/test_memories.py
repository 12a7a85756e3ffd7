"""A memory's `occurred_at` read from the client's metadata when the request does not give one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from shared.api.memories import METADATA_TIME_KEYS, MemoryAdd, MemoryCreate, MemoryUpdate


@pytest.mark.parametrize("name", ["timestamp", "time", "date"])
def test_occurred_at_comes_from_a_metadata_time(name):
    item = MemoryCreate(content="we met at the mill", metadata={name: "2023-05-08T13:56:00+00:00"})
    assert item.occurred_at == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert item.metadata == {name: "2023-05-08T13:56:00+00:00"}  # the metadata is the client's, kept as sent


def test_a_date_alone_is_its_midnight_and_no_zone_is_utc_and_a_zone_is_kept():
    assert MemoryCreate(content="x", metadata={"date": "2023-05-08"}).occurred_at == datetime(2023, 5, 8, tzinfo=UTC)
    naive = MemoryCreate(content="x", metadata={"timestamp": "2023-05-08T13:56:00"}).occurred_at
    assert naive == datetime(2023, 5, 8, 13, 56, tzinfo=UTC) and naive.tzinfo is not None
    zoned = MemoryCreate(content="x", metadata={"time": "2023-05-08T15:56:00+02:00"}).occurred_at
    assert zoned is not None and zoned.utcoffset() == timedelta(hours=2)
    assert zoned == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    zulu = MemoryCreate(content="x", metadata={"timestamp": "2023-05-08T13:56:00Z"}).occurred_at
    assert zulu == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def test_the_keys_are_read_in_order_and_one_that_does_not_parse_is_passed_over():
    assert METADATA_TIME_KEYS == ("timestamp", "time", "date")
    every = {"date": "2023-01-01", "time": "2023-02-02", "timestamp": "2023-03-03"}
    assert MemoryCreate(content="x", metadata=every).occurred_at == datetime(2023, 3, 3, tzinfo=UTC)
    afternoon = {"time": "1:56 pm on 8 May, 2023", "date": "2023-05-08"}
    assert MemoryCreate(content="x", metadata=afternoon).occurred_at == datetime(2023, 5, 8, tzinfo=UTC)


@pytest.mark.parametrize("value", ["1:56 pm on 8 May, 2023", "yesterday", "", "2023-13-40", 1683554160, None, {}])
def test_a_metadata_time_that_is_not_iso_8601_is_ignored_silently(value):
    item = MemoryCreate(content="x", metadata={"timestamp": value})
    assert item.occurred_at is None and item.metadata == {"timestamp": value}


def test_a_top_level_occurred_at_wins_over_metadata():
    given = datetime(2020, 1, 1, 9, 0, tzinfo=timezone(timedelta(hours=-5)))
    item = MemoryCreate(content="x", occurred_at=given, metadata={"timestamp": "2023-05-08T13:56:00Z"})
    assert item.occurred_at == given
    add = MemoryAdd(content="x", occurred_at="2021-06-01T00:00:00", metadata={"date": "2023-05-08"})
    assert add.occurred_at == datetime(2021, 6, 1, tzinfo=UTC)


@pytest.mark.parametrize("content", ["   ", "\x1c", "\n\t "])
def test_a_change_of_content_to_whitespace_is_refused_as_an_add_is(content):
    # PATCH took it and the engine's own check then failed: a 500 (found by tests/security/test_schemathesis.py)
    for build in (lambda: MemoryUpdate(content=content), lambda: MemoryCreate(content=content)):
        with pytest.raises(ValidationError, match="content must contain non-whitespace text"):
            build()
    assert MemoryUpdate(content=" a note ").content == " a note "


def test_a_zone_postgresql_cannot_take_becomes_utc_and_one_it_can_is_kept():
    far = MemoryCreate(content="x", occurred_at="2023-05-08T18:16:41+17:23").occurred_at
    assert far == datetime(2023, 5, 8, 0, 53, 41, tzinfo=UTC) and far.utcoffset() == timedelta(0)
    near = MemoryCreate(content="x", occurred_at="2023-05-08T18:16:41+15:59").occurred_at
    assert near is not None and near.utcoffset() == timedelta(hours=15, minutes=59)
    from_metadata = MemoryCreate(content="x", metadata={"time": "2023-05-08T15:56:00-20:00"}).occurred_at
    assert from_metadata == datetime(2023, 5, 9, 11, 56, tzinfo=UTC)


@pytest.mark.parametrize(
    "when", ["0001-01-01T05:00:00+10:00", "9999-12-31T20:00:00-10:00", "0001-01-01T00:00:00+16:00"]
)
def test_a_time_outside_the_years_1_to_9999_in_utc_is_refused_and_passed_over_in_metadata(when):
    with pytest.raises(ValidationError, match="outside the years 1 to 9999 in UTC"):
        MemoryCreate(content="x", occurred_at=when)
    assert MemoryCreate(content="x", metadata={"time": when}).occurred_at is None
