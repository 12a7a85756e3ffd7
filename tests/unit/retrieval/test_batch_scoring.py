"""The scoring stage over arrays (`batch_scoring`) gives the scalar formulas' scores (`score_candidate`) to 1e-9:
on candidates recorded from a query of a 100k store, and on generated ones that reach every branch."""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from shared.lifecycle.formulas import Aging
from shared.retrieval.batch_scoring import score_all, score_candidates
from shared.retrieval.fusion import Candidate
from shared.retrieval.scoring import MemoryState, ScoringParams, score_candidate

RECORDED = Path(__file__).with_name("recorded_candidates.json")
NOW = datetime(2026, 12, 7, tzinfo=UTC)
PARAMS = {
    "defaults": ScoringParams(),
    "aging off": ScoringParams(aging=None),
    "sector scaling off": ScoringParams(aging=Aging(sector_scaling=False)),
    "recency weighted": ScoringParams().for_request(0.6),
    "all recall counts": replace(ScoringParams(), recall_share=1.0, confidence_weight=0.3, lexical_power=1.0),
}


def recorded() -> list[tuple[float, datetime, list[tuple[Candidate, dict, float | None]]]]:
    """Each recorded query: its best full-text score, its time and its candidates, each with its row and cosine."""
    queries = []
    for query in json.loads(RECORDED.read_text()):
        items = []
        for n, item in enumerate(query["candidates"]):
            row = {
                k: datetime.fromisoformat(v) if k.endswith("_at") and v is not None else v
                for k, v in item["row"].items()
            }
            items.append((Candidate(uuid.UUID(int=n + 1), **item["candidate"]), row, item["cosine"]))
        queries.append((query["max_lexical"], datetime.fromisoformat(query["now"]), items))
    return queries


def generated(seed: int, n: int = 300) -> list[tuple[Candidate, dict, float | None]]:
    """Candidates and rows over every branch: no cosine or a negative one, no full-text score, hops, activation,
    inheritance, support, the period; salience under and over the tiers' bounds, recall lift above the salience,
    coactivations, no sector rate, seen and used in the past or the future, every status, confidence out of range."""
    rng = random.Random(seed)
    items = []
    for i in range(n):
        seen = NOW - timedelta(days=rng.choice([0.0, 0.5, 3, 5.99, 6, 30, 400, -2]) + rng.random())
        used = rng.choice([None, seen, seen - timedelta(days=rng.uniform(0, 90)), seen + timedelta(days=1)])
        row = {
            "salience": rng.choice([0.0, 0.1, 0.39, 0.41, 0.69, 0.71, 1.0, rng.random()]),
            "last_seen_at": seen,
            "last_used_at": used,
            "created_at": seen - timedelta(days=rng.uniform(0, 50)),
            "status": rng.choice(["active", "active", "superseded", "contradicted", "archived"]),
            "confidence": rng.choice([1.0, 0.5, 0.0, -0.2, 1.3]),
            "recall_lift": rng.choice([0.0, 0.0, None, 0.2, 0.9, -0.1]),
            "coactivations": rng.choice([0, 1, 5, 6, 40, None]),
            "decay_lambda": rng.choice([None, 0.005, 0.015, 0.02, 0.001]),
        }
        candidate = Candidate(
            uuid.UUID(int=i + 1),
            lexical_score=rng.choice([None, 0.0, rng.uniform(0.1, 20)]),
            hops=rng.choice([0, 0, 1, 2]),
            activation=rng.choice([0.0, rng.random()]),
            inherited=rng.choice([0.0, 0.0, rng.random()]),
            support=rng.choice([0.0, rng.random()]),
            in_period=rng.random() < 0.2,
            waypoint_weight=rng.choice([0.0, rng.random()]),
        )
        items.append((candidate, row, rng.choice([None, rng.uniform(-0.3, 1.0), 0.0])))
    return items


def assert_same_as_scalar(
    items: list[tuple[Candidate, dict, float | None]], *, max_lexical: float, now: datetime, params: ScoringParams
) -> None:
    batch = [replace(c) for c, _, _ in items]
    scores = score_candidates(
        batch,
        [row for _, row, _ in items],
        [cos for _, _, cos in items],
        max_lexical=max_lexical,
        now=now,
        params=params,
    )
    for (candidate, row, cosine), ours, score in zip(items, batch, scores, strict=True):
        one = replace(candidate)
        expected = score_candidate(
            one, MemoryState.of(row), cosine=cosine, max_lexical=max_lexical, now=now, params=params
        )
        assert ours.score == pytest.approx(expected, abs=1e-9) and float(score) == ours.score
        assert ours.relevance == pytest.approx(one.relevance, abs=1e-9)
        assert ours.similarity == pytest.approx(one.similarity, abs=1e-12)
        assert ours.components.keys() == one.components.keys()
        assert ours.components == pytest.approx(one.components, abs=2e-6)  # the trace's 6-decimal rounding


@pytest.mark.parametrize("name", list(PARAMS))
def test_recorded_candidates_score_as_one_by_one(name):
    queries = recorded()
    assert sum(len(items) for _, _, items in queries) > 200
    for max_lexical, now, items in queries:
        assert_same_as_scalar(items, max_lexical=max_lexical, now=now, params=PARAMS[name])
        # the same store read months later: aging, recency and tiers apart from "just seen"
        assert_same_as_scalar(items, max_lexical=max_lexical, now=now + timedelta(days=75), params=PARAMS[name])


@pytest.mark.parametrize("name", list(PARAMS))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_generated_candidates_over_every_branch_score_as_one_by_one(name, seed):
    assert_same_as_scalar(generated(seed), max_lexical=12.5, now=NOW, params=PARAMS[name])


def test_no_full_text_score_in_the_query_leaves_lexical_strength_zero():
    items = generated(4, n=50)
    assert_same_as_scalar(items, max_lexical=0.0, now=NOW, params=ScoringParams())


def test_score_all_keeps_the_candidates_order_and_skips_those_without_a_row():
    items = generated(5, n=20)
    candidates = {c.id: c for c, _, _ in items}
    rows = {c.id: row for c, row, _ in items[::2]}
    cosines = {c.id: cos for c, _, cos in items}
    scored = score_all(candidates, rows, cosines, [], max_lexical=5.0, now=NOW, params=ScoringParams())
    assert [c.id for c, _ in scored] == [c.id for c, _, _ in items[::2]]
    assert all(row is rows[c.id] for c, row in scored)
    fused = score_all(candidates, rows, cosines, [], max_lexical=5.0, now=NOW, params=ScoringParams(), fusion_only=True)
    assert all(c.score == c.rrf_score for c, _ in fused)
