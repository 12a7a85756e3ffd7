"""bench.updates builds each case's conversation as updates-dev's README says, and scores ranks as it defines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

from bench.updates import Case, Outcome, conversation

FILLER = [f"filler {i}" for i in range(40)]
NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
CASE = Case("upd-x", "I live in Paris.", "We moved to Berlin.", "Which city do I live in?")


def test_a_case_is_thirty_filler_turns_with_the_old_fact_in_session_one_and_the_new_in_session_four():
    turns = conversation(3, CASE, FILLER, NOW)
    texts = [text for text, _, _ in turns]
    assert len(turns) == 32
    assert [t for t in texts if t.startswith("filler")] == [f"filler {(7 * 3 + i) % 40}" for i in range(30)]
    sessions = [[t for t in turns if t[1] == f"upd-x-session-{s}"] for s in range(1, 6)]
    assert [len(s) for s in sessions] == [7, 6, 6, 7, 6]
    assert sessions[0][2][0] == CASE.old
    assert sessions[3][3][0] == CASE.new
    for session, days_ago in zip(sessions, (90, 75, 60, 30, 15), strict=True):
        assert session[0][2] == NOW - timedelta(days=days_ago)
        gaps = {b[2] - a[2] for a, b in pairwise(session)}
        assert gaps == {timedelta(minutes=2)}


def test_ranks_are_scored_as_the_protocol_defines():
    def outcome(new: int | None, old: int | None) -> Outcome:
        return Outcome(CASE, new, old, 5, "off", 0)

    assert outcome(1, 2).newest_first and outcome(1, 2).newest_above_stale and not outcome(1, 2).stale_first
    assert outcome(3, None).newest_above_stale and not outcome(3, None).newest_first
    assert outcome(2, 1).stale_first and not outcome(2, 1).newest_above_stale and outcome(2, 1).newest_in_top
    assert not outcome(None, 1).newest_in_top and not outcome(None, None).newest_above_stale
