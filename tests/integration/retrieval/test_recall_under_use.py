"""Recall as users use it: a store that answered questions (reinforcement on, applied) ranks the next ones as well
as a fresh store does, and a default query still reinforces what it returns."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from shared.api.memories import MemoryCreate
from shared.api.query import QueryRequest
from shared.lifecycle.reinforcement import QueryUse, reinforce_uses

pytestmark = pytest.mark.integration

LOCOMO = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "locomo-dev"
CONVERSATION = "conv-42"  # 629 turns, 260 questions with evidence
QUESTIONS = 200


def _load(db, engine, tenant: str, turns: list[dict]) -> dict[uuid.UUID, str]:
    """Every turn stored as a native client stores it (after the turn before it in its session, with its time);
    memory id -> turn id."""
    ids: dict[uuid.UUID, str] = {}
    previous: tuple[int, uuid.UUID] | None = None
    for turn in turns:
        item = MemoryCreate(
            content=f"{turn['speaker']}: {turn['text']}",
            metadata={"doc_id": turn["id"]},
            occurred_at=datetime.fromisoformat(turn["timestamp"]),
        )
        follows = previous[1] if previous and previous[0] == turn["session"] else None
        with db.session(tenant) as s:
            memory, _ = engine.add(s, tenant, item, follows=follows)
        ids[memory["id"]] = turn["id"]
        previous = (turn["session"], memory["id"])
    return ids


def _recall_at_5(ids: list[uuid.UUID], mapping: dict[uuid.UUID, str], gold: set[str]) -> float:
    return len({mapping.get(i) for i in ids[:5]} & gold) / len(gold)


def _ask(db, engine, retriever, tenant: str, question: dict, *, reinforce: bool) -> list[uuid.UUID]:
    """A query at the defaults (k = 10); with `reinforce`, its reinforcement applied as the worker applies it."""
    with db.session(tenant) as s:
        outcome = retriever.query(s, tenant, QueryRequest(query=question["question"], k=10, reinforce=reinforce))
    if reinforce:
        with db.session(tenant) as s:
            use = QueryUse(f"query:{uuid.uuid4()}", outcome.reinforce_ids, outcome.traversed)
            reinforce_uses(engine, s, tenant, [use])
    return [c.id for c, _ in outcome.matches]


@pytest.fixture(scope="module")
def conversation() -> tuple[list[dict], list[dict]]:
    if not LOCOMO.is_dir():
        pytest.skip(f"the evaluation data is not beside the project ({LOCOMO})")
    turns = [json.loads(line) for line in (LOCOMO / "documents.jsonl").open()]
    turns = sorted((t for t in turns if t["conversation_id"] == CONVERSATION), key=lambda t: (t["session"], t["turn"]))
    questions = [json.loads(line) for line in (LOCOMO / "queries.jsonl").open()]
    questions = [q for q in questions if q["conversation_id"] == CONVERSATION and q["gold_ids"]][:QUESTIONS]
    return turns, questions


def test_questions_asked_after_the_other_half_was_asked_score_no_worse_than_on_a_fresh_store(
    db, maintenance, engine, retriever, conversation
):
    turns, questions = conversation
    assert len(questions) == QUESTIONS
    copies = [f"t-{uuid.uuid4().hex[:12]}" for _ in range(2)]
    mappings = [_load(db, engine, tenant, turns) for tenant in copies]
    fresh = [
        _recall_at_5(_ask(db, engine, retriever, copies[0], q, reinforce=False), mappings[0], set(q["gold_ids"]))
        for q in questions
    ]
    even, odd = questions[0::2], questions[1::2]
    used: list[float] = []
    for tenant, mapping, (first, second) in zip(copies, mappings, ((even, odd), (odd, even)), strict=True):
        for q in first:
            _ask(db, engine, retriever, tenant, q, reinforce=True)
        used += [
            _recall_at_5(_ask(db, engine, retriever, tenant, q, reinforce=True), mapping, set(q["gold_ids"]))
            for q in second
        ]
    with maintenance.session() as s:  # the use was real: most of what was returned was lifted by it
        lifted = s.execute(
            text("SELECT count(*) FROM memories WHERE user_id = ANY(:u) AND recall_lift > 0 AND salience > 0.4"),
            {"u": copies},
        ).scalar_one()
    assert lifted > 200
    fresh_mean, used_mean = sum(fresh) / len(fresh), sum(used) / len(used)
    assert used_mean >= fresh_mean - 0.01, (used_mean, fresh_mean)


def test_a_default_query_raises_salience_last_seen_and_coactivations_of_what_it_returns(db, engine, retriever, tenant):
    with db.session() as s:
        orchid, _ = engine.add(s, tenant, MemoryCreate(content="She repotted the orchid and moved it to the window"))
        s.execute(
            text("UPDATE memories SET last_seen_at = now() - interval '3 days' WHERE id = :id"), {"id": orchid["id"]}
        )
    with db.session() as s:
        outcome = retriever.query(s, tenant, QueryRequest(query="orchid window"))
    assert [c.id for c, _ in outcome.matches] == [orchid["id"]] and outcome.reinforce_ids == [orchid["id"]]
    with db.session() as s:
        reinforce_uses(engine, s, tenant, [QueryUse(f"query:{uuid.uuid4()}", outcome.reinforce_ids)])
        row = s.execute(
            text(
                "SELECT salience, recall_lift, coactivations, last_seen_at > now() - interval '1 minute' AS seen "
                "FROM memories WHERE id = :id"
            ),
            {"id": orchid["id"]},
        ).one()
    assert row.salience == pytest.approx(orchid["salience"] + 0.5) or row.salience == pytest.approx(1.0)
    assert row.recall_lift == pytest.approx(row.salience - orchid["salience"])
    assert row.coactivations == 1 and row.seen
