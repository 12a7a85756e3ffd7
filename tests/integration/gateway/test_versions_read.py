"""Versions of a fact on the read path, through the API (a real gateway app in process, a real database): the latest
version answers for the ones it supersedes, `include_superseded` shows them below it, a question about the past swaps
the two, `as_of` finds the version current then, and near copies move below the other matches."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from services.gateway.app import create_app

pytestmark = pytest.mark.integration

FILLER = (
    "I bought a new lamp for the desk.",
    "The dentist appointment is on Thursday.",
    "We watched a film about bees.",
)


@pytest.fixture(scope="module")
def client(settings):
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def add(client: TestClient, tenant: str, content: str, **fields) -> str:
    response = client.post("/memory/add", json={"content": content, "user_id": tenant, **fields})
    assert response.status_code == 200, response.text
    return response.json()["id"]


def link(client: TestClient, tenant: str, newer: str, older: str) -> None:
    body = {"src_id": newer, "dst_id": older, "kind": "supersedes", "user_id": tenant}
    response = client.post("/memory/link", json=body)
    assert response.status_code == 200, response.text


def ask(client: TestClient, tenant: str, query: str, **fields) -> list[dict]:
    body = {"query": query, "user_id": tenant, "k": 10, "explain": True, "reinforce": False, **fields}
    response = client.post("/memory/query", json=body)
    assert response.status_code == 200, response.text
    return response.json()["matches"]


def ids(matches: list[dict]) -> list[str]:
    return [m["id"] for m in matches]


def a_fact_that_changed(client: TestClient, tenant: str) -> tuple[str, str]:
    for n, text in enumerate(FILLER):
        add(client, tenant, text, occurred_at=f"2026-01-0{n + 1}T09:00:00Z")
    old = add(client, tenant, "I live in a small flat in Paris.", occurred_at="2026-01-10T09:00:00Z")
    new = add(client, tenant, "Our new home is a house in Berlin.", occurred_at="2026-03-01T09:00:00Z")
    link(client, tenant, new, old)
    return old, new


def test_by_default_the_latest_version_answers_for_the_superseded_one(client, tenant):
    old, new = a_fact_that_changed(client, tenant)
    matches = ask(client, tenant, "Which city do I live in?")
    assert old not in ids(matches)
    answer = next(m for m in matches if m["id"] == new)
    assert answer["trace"]["answers_for"] == [old]
    assert answer["trace"]["components"]["inherited"] > 0  # the old one's match, though it shares no word with it
    assert any(note.startswith(f"answers for {old}") for note in answer["trace"]["notes"])


def test_include_superseded_shows_the_older_version_below_its_successor_with_its_dates(client, tenant):
    old, new = a_fact_that_changed(client, tenant)
    matches = ask(client, tenant, "Which city do I live in?", retrieval={"include_superseded": True})
    order = ids(matches)
    assert order.index(new) < order.index(old)
    stale = matches[order.index(old)]
    assert stale["score"] <= matches[order.index(new)]["score"]
    assert stale["trace"]["components"]["status_penalty"] == 0.5
    assert stale["trace"]["superseded_by"] == [new]
    assert stale["trace"]["superseded_on"].startswith("2026-03-01T09:00:00")
    assert stale["trace"]["notes"] == [f"superseded by {new} on 2026-03-01"]


def test_a_question_about_the_past_is_answered_by_the_older_version(client, tenant):
    old, new = a_fact_that_changed(client, tenant)
    order = ids(ask(client, tenant, "Which city did I live in before?"))
    assert order[:2] == [old, new]
    assert ids(ask(client, tenant, "Which city do I live in?"))[0] == new


def test_as_of_finds_the_version_current_then(client, tenant):
    old, new = a_fact_that_changed(client, tenant)
    then = ask(client, tenant, "Which city do I live in?", filters={"as_of": "2026-02-01T00:00:00Z"})
    assert old in ids(then) and new not in ids(then)
    stale = then[ids(then).index(old)]
    assert "status_penalty" not in stale["trace"]["components"]  # current then
    assert stale["trace"]["superseded_by"] == [new]  # and the trace still says what came later
    now = ask(client, tenant, "Which city do I live in?", filters={"as_of": "2026-03-02T00:00:00Z"})
    assert new in ids(now) and old not in ids(now)


def test_a_wrong_supersession_hides_a_true_fact_until_its_link_is_deleted(client, tenant):
    """The risk of hiding by default: a false supersession (by a client, or by the write-time rule) hides a true
    fact. The trace of the memory answering for it names it, and deleting the link brings it back."""
    sister = add(client, tenant, "Alice's sister works as a nurse in Lyon.", occurred_at="2026-01-05T09:00:00Z")
    brother = add(client, tenant, "Alice's brother got a job in Rome.", occurred_at="2026-02-05T09:00:00Z")
    link(client, tenant, brother, sister)
    hidden = ask(client, tenant, "Where does Alice's sister work?")
    assert sister not in ids(hidden)
    assert hidden[ids(hidden).index(brother)]["trace"]["answers_for"] == [sister]
    params = {"src_id": brother, "dst_id": sister, "kind": "supersedes", "user_id": tenant}
    assert client.delete("/memory/link", params=params).json()["restored"] is True
    restored = ask(client, tenant, "Where does Alice's sister work?")
    assert ids(restored)[0] == sister and "answers_for" not in restored[ids(restored).index(brother)]["trace"]


def test_a_near_copy_moves_below_the_other_matches_unless_diversity_is_1(client, tenant):
    first = add(client, tenant, "Thanks, Mel! The ferry leaves at seven.", occurred_at="2026-01-01T09:00:00Z")
    # the same words, not as a rotation: another memory at write (fact dedup), a near copy on the read path
    copy = add(client, tenant, "mel, thanks! the ferry leaves at seven", occurred_at="2026-01-02T09:00:00Z")
    other = add(client, tenant, "The ferry to the island is slow.", occurred_at="2026-01-03T09:00:00Z")
    add(client, tenant, "Mel likes the morning market.", occurred_at="2026-01-04T09:00:00Z")
    plain = ask(client, tenant, "When does the ferry leave?", diversity=1)
    assert not any("copy_of" in m["trace"] for m in plain)
    pair = [i for i in ids(plain) if i in (first, copy)]
    matches = ask(client, tenant, "When does the ferry leave?")
    order = ids(matches)
    assert order[-1] == pair[1] and matches[-1]["trace"]["copy_of"] == pair[0]
    assert order.index(other) < order.index(pair[1])
    assert [m["score"] for m in matches] == sorted((m["score"] for m in matches), reverse=True)
