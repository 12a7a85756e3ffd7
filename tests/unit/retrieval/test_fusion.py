"""Reciprocal Rank Fusion of the two rankers into candidates."""

from __future__ import annotations

import pytest

from shared.retrieval.fusion import Candidate, fuse
from tests.unit.retrieval.helpers import A, B, C


def test_fuse_sums_reciprocal_ranks_and_keeps_both_traces():
    fused = fuse([(A, 3.0), (B, 1.0)], [(B, 0.9), (C, 0.8)], rrf_k=60, limit=10)
    assert fused[B].rrf_score == pytest.approx(1 / 62 + 1 / 61)
    assert fused[A].rrf_score == pytest.approx(1 / 61)
    assert fused[C].rrf_score == pytest.approx(1 / 62)
    assert (fused[B].lexical_rank, fused[B].dense_rank) == (2, 1)
    assert fused[A].dense_rank is None and fused[C].lexical_rank is None
    assert next(iter(fused)) == B  # consensus beats a single first place


def test_fuse_is_graceful_when_one_ranker_is_empty_and_respects_limit():
    only_dense = fuse([], [(A, 0.9), (B, 0.5), (C, 0.1)], rrf_k=60, limit=2)
    assert list(only_dense) == [A, B]
    assert fuse([], [], rrf_k=60, limit=5) == {}


def test_a_note_joins_the_trace_when_it_is_built_and_a_new_trace_drops_it():
    built = []

    def build(value: float) -> dict[str, float]:
        built.append(value)
        return {"similarity": value}

    candidate = Candidate(A)
    candidate.trace_later(build, 0.5)
    candidate.note("evidence", 0.25)
    assert built == []  # noted without building the trace
    assert candidate.components == {"similarity": 0.5, "evidence": 0.25}
    candidate.note("coverage", 1.0)  # once built, straight in
    assert list(candidate.components) == ["similarity", "evidence", "coverage"]
    candidate.trace_later(build, 0.75)
    candidate.note("evidence", 0.1)
    candidate.trace_later(build, 0.9)  # scored again: what was noted of the earlier scores goes with them
    assert candidate.components == {"similarity": 0.9}
    assert built == [0.5, 0.9]
