"""Injection and retrieval-blindness outcomes (the recall seed's monitoring)."""

from __future__ import annotations


def test_a_query_outcome_is_injected_blind_or_without_memories() -> None:
    from shared.retrieval.stats import outcome

    assert outcome(matches=3, candidates=12) == "injected"
    assert outcome(matches=0, candidates=12) == "blind"  # memories were there; the gate let none through
    assert outcome(matches=0, candidates=0) == "no_memories"
