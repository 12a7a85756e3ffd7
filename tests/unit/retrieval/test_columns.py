"""The scoring stage over columns against the scalar formulas it vectorises: the same scores to 1e-9.

Two sources of candidates: ones recorded from a real query (data/candidates.json: a write-path store, reinforced by
earlier queries, with waypoints, versions and a fingerprint among them) and generated ones that reach every branch
(no cosine, no lexical score, each status, tiers, a later use, no sector rate, aging off).
"""

from __future__ import annotations

import copy
import json
import math
import random
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.lifecycle.formulas import Aging
from shared.retrieval.columns import score_all, score_columns
from shared.retrieval.fusion import Candidate
from shared.retrieval.scoring import MemoryState, ScoringParams, score_candidate

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
RECORDED = Path(__file__).parent / "data" / "candidates.json"


def scalar(candidates, rows, cosines, *, max_lexical, params, now=NOW):
    out = []
    for c, row, cosine in zip(candidates, rows, cosines, strict=True):
        c = copy.copy(c)
        score_candidate(c, MemoryState.of(row), cosine=cosine, max_lexical=max_lexical, now=now, params=params)
        out.append(c)
    return out


def assert_same(vectorised: list[Candidate], reference: list[Candidate]) -> None:
    for v, r in zip(vectorised, reference, strict=True):
        assert v.score == pytest.approx(r.score, abs=1e-9, rel=0)
        assert v.relevance == pytest.approx(r.relevance, abs=1e-9, rel=0)
        assert v.similarity == pytest.approx(r.similarity, abs=1e-9, rel=0)
        assert v.components.keys() == r.components.keys()
        for name, value in r.components.items():  # rounded to 6 places: one ulp may cross a rounding step
            assert v.components[name] == pytest.approx(value, abs=1.5e-6, rel=0), name


def when(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def recorded() -> tuple[list[Candidate], list[dict], list[float | None], float, datetime]:
    data = json.loads(RECORDED.read_text())
    candidates, rows, cosines = [], [], []
    for item in data["candidates"]:
        c = item["candidate"]
        candidates.append(Candidate(uuid.UUID(c.pop("id")), **c))
        row = item["row"]
        for name in ("last_seen_at", "last_used_at", "created_at"):
            row[name] = when(row.get(name))
        rows.append(row)
        cosines.append(item["cosine"])
    return candidates, rows, cosines, data["max_lexical"], datetime.fromisoformat(data["now"])


def test_recorded_candidates_score_as_the_scalar_formula():
    candidates, rows, cosines, max_lexical, now = recorded()
    assert len(candidates) >= 50
    params = ScoringParams()
    reference = scalar(candidates, rows, cosines, max_lexical=max_lexical, params=params, now=now)
    vectorised = [copy.copy(c) for c in candidates]
    score_columns(vectorised, rows, cosines, max_lexical=max_lexical, now=now, params=params)
    assert_same(vectorised, reference)
    # and the recorded set reaches the branches that matter: waypoints, a lexical-only find, a reinforced memory
    assert any(c.hops > 0 for c in candidates) and any(c.lexical_score is None for c in candidates)
    assert any(float(r["recall_lift"]) > 0 for r in rows)


def test_recorded_candidates_keep_their_order_at_a_recency_weight():
    candidates, rows, cosines, max_lexical, now = recorded()
    params = ScoringParams().for_request(0.8)
    reference = scalar(candidates, rows, cosines, max_lexical=max_lexical, params=params, now=now)
    vectorised = [copy.copy(c) for c in candidates]
    score_columns(vectorised, rows, cosines, max_lexical=max_lexical, now=now, params=params)
    assert_same(vectorised, reference)
    by_score = [c.id for c in sorted(vectorised, key=lambda c: (-c.score, str(c.id)))]
    assert by_score == [c.id for c in sorted(reference, key=lambda c: (-c.score, str(c.id)))]


# most memories seen within the tier rules' six days, some long ago, a few "in the future" (a clock skew)
days = st.floats(min_value=-2.0, max_value=10.0) | st.floats(min_value=10.0, max_value=400.0)
unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@st.composite
def case(draw):
    candidate = Candidate(
        uuid.UUID(int=draw(st.integers(1, 2**64))),
        lexical_score=draw(st.none() | st.floats(min_value=0.0, max_value=30.0)),
        hops=draw(st.integers(0, 2)),
        activation=draw(unit),
        inherited=draw(st.sampled_from([0.0, 0.3, 0.9])),
        support=draw(unit),
        in_period=draw(st.booleans()),
        waypoint_weight=draw(unit),
    )
    seen = draw(days)
    salience = draw(unit)
    row = {
        "salience": salience,
        "recall_lift": draw(st.sampled_from([0.0, salience / 2, salience, 1.0])),
        "confidence": draw(st.floats(min_value=-0.5, max_value=1.5)),
        "coactivations": draw(st.integers(0, 8)),
        "decay_lambda": draw(st.none() | st.sampled_from([0.005, 0.015, 0.02, 0.05])),
        "status": draw(st.sampled_from(["active", "superseded", "contradicted", "archived"])),
        "last_seen_at": NOW - timedelta(days=seen),
        "last_used_at": draw(st.none() | days.map(lambda d: NOW - timedelta(days=d))),
        "created_at": NOW - timedelta(days=seen + draw(st.floats(0.0, 30.0))),
    }
    cosine = draw(st.none() | st.floats(min_value=-0.3, max_value=1.0))
    return candidate, row, cosine


@settings(max_examples=150, deadline=None)
@given(
    st.lists(case(), min_size=1, max_size=40),
    st.sampled_from([0.0, 1.0, 7.5]),
    st.sampled_from([None, Aging(), Aging(sector_scaling=False)]),
    st.sampled_from([None, 0.0, 0.5, 1.0]),
)
def test_generated_candidates_score_as_the_scalar_formula(cases, max_lexical, aging, recency_weight):
    candidates, rows, cosines = (list(part) for part in zip(*cases, strict=True))
    params = ScoringParams(aging=aging, context_weight=0.4, period_weight=0.5).for_request(recency_weight)
    reference = scalar(candidates, rows, cosines, max_lexical=max_lexical, params=params)
    vectorised = [copy.copy(c) for c in candidates]
    score_columns(vectorised, rows, cosines, max_lexical=max_lexical, now=NOW, params=params)
    assert_same(vectorised, reference)


def test_a_contradiction_demotes_the_weaker_as_before():
    a, b = Candidate(uuid.UUID(int=1), lexical_score=4.0), Candidate(uuid.UUID(int=2), lexical_score=4.0)
    rows = {
        a.id: {"salience": 0.9, "confidence": 1.0, "status": "active", "last_seen_at": NOW - timedelta(days=1)},
        b.id: {"salience": 0.3, "confidence": 1.0, "status": "active", "last_seen_at": NOW - timedelta(days=1)},
    }
    scored = score_all(
        {a.id: a, b.id: b},
        rows,
        {a.id: 0.5, b.id: 0.5},
        [(a.id, b.id)],
        max_lexical=4.0,
        now=NOW,
        params=ScoringParams(),
    )
    assert [c.id for c, _ in scored] == [a.id, b.id]
    assert (
        b.components["conflict_penalty"] == ScoringParams().conflict_penalty and "conflict_penalty" not in a.components
    )
    assert b.score < a.score and math.isfinite(b.score)


def test_no_candidates_score_nothing():
    assert score_columns([], [], [], max_lexical=1.0, now=NOW, params=ScoringParams()).shape == (0,)


@pytest.mark.parametrize("aging", [Aging(), Aging(sector_scaling=False), None])
def test_a_seeded_spread_scores_as_the_scalar_formula(aging):
    """Uniform draws over every field (hypothesis favours boundaries; tier edges need the middle of ranges too)."""
    rng = random.Random(49)
    candidates, rows, cosines = [], [], []
    for n in range(3000):
        seen = rng.choice([rng.uniform(-1, 7), rng.uniform(0, 60), rng.uniform(0, 900)])
        salience = rng.random()
        candidates.append(
            Candidate(
                uuid.UUID(int=n + 1),
                lexical_score=rng.choice([None, rng.uniform(0, 12)]),
                hops=rng.randint(0, 2),
                activation=rng.random() * rng.choice([0, 1]),
                inherited=rng.random() * rng.choice([0, 0, 1]),
                support=rng.random(),
                in_period=rng.random() < 0.2,
                waypoint_weight=rng.random(),
            )
        )
        rows.append(
            {
                "salience": salience,
                "recall_lift": rng.choice([0.0, rng.uniform(0, salience), rng.uniform(0, 1)]),
                "confidence": rng.uniform(0.2, 1.0),
                "coactivations": rng.randint(0, 9),
                "decay_lambda": rng.choice([None, 0.005, 0.015, 0.02, 0.05]),
                "status": rng.choice(["active", "active", "superseded", "contradicted"]),
                "last_seen_at": NOW - timedelta(days=seen),
                # never returned by a query (used when last seen), used earlier, or (a client's confirmation) later
                "last_used_at": rng.choice(
                    [None, NOW - timedelta(days=seen), NOW - timedelta(days=seen + rng.uniform(-3, 40))]
                ),
                "created_at": NOW - timedelta(days=seen + rng.uniform(0, 40)),
            }
        )
        cosines.append(rng.choice([None, rng.uniform(-0.2, 1.0)]))
    params = ScoringParams(aging=aging)
    reference = scalar(candidates, rows, cosines, max_lexical=12.0, params=params)
    vectorised = [copy.copy(c) for c in candidates]
    score_columns(vectorised, rows, cosines, max_lexical=12.0, now=NOW, params=params)
    assert_same(vectorised, reference)
