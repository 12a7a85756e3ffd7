"""`MemoryFilter.as_of`: the versions of a fact current at a time, in SQL (when it happened) and on rows read."""

from __future__ import annotations

from datetime import UTC, datetime

from shared.storage.rows import FILTER_PARAMS, MemoryFilter

JAN, FEB, MAR, APR = (datetime(2026, month, 1, tzinfo=UTC) for month in (1, 2, 3, 4))


def row(*, happened: datetime, valid_to: datetime | None = None) -> dict:
    return {"sectors": ["semantic"], "tags": [], "created_at": APR, "occurred_at": happened, "valid_to": valid_to}


def test_as_of_keeps_the_version_current_then():
    at_feb = MemoryFilter(as_of=FEB)
    assert at_feb.active
    assert at_feb.passes(row(happened=JAN, valid_to=MAR))  # replaced later: current in February
    assert not at_feb.passes(row(happened=JAN, valid_to=FEB))  # replaced exactly then: no longer current
    assert not at_feb.passes(row(happened=MAR))  # had not happened yet
    assert at_feb.passes(row(happened=JAN))  # never replaced


def test_as_of_is_written_with_the_parameters_every_filter_has():
    clause, params = MemoryFilter(as_of=MAR).sql("m")
    assert ":f_occurred_before" in clause and params == {"f_occurred_before": MAR}
    _, params = MemoryFilter(as_of=MAR, occurred_before=FEB).sql("m")
    assert params == {"f_occurred_before": FEB}  # the earlier bound
    _, params = MemoryFilter(as_of=FEB, occurred_before=MAR).sql("m")
    assert params == {"f_occurred_before": FEB}
    assert set(params) <= set(FILTER_PARAMS)
