"""The lifecycle over HTTP: an operator's decay cycle on a real worker, stats, and regeneration on a query hit."""

from __future__ import annotations

import time
import uuid

import pytest
from sqlalchemy import text

from shared.memory.sectors import SECTORS

pytestmark = pytest.mark.e2e


def wait_for(predicate, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    return predicate()


def test_an_operator_cycle_fingerprints_and_a_query_hit_regenerates(http, tenant, worker, db):
    old = http.post(
        "/memory/add", json={"content": "The harbour ferry timetable changes in October", "user_id": tenant}
    ).json()
    fresh = http.post("/memory/add", json={"content": "Lunch with Maria on Friday", "user_id": tenant}).json()
    with db.session() as s:  # a memory nobody has looked at for a year, and not important
        s.execute(
            text("UPDATE memories SET salience = 0.2, last_seen_at = now() - interval '365 days' WHERE id = :id"),
            {"id": old["id"]},
        )

    run = http.post("/maintenance/decay", params={"wait": "true"}, json={"ratio": 1.0})
    assert run.status_code == 200, run.text
    body = run.json()
    assert body["status"] == "succeeded" and body["trigger"] == "operator" and body["ratio"] == 1.0
    assert body["fingerprinted"] >= 1 and body["processed"] >= 2
    assert body["log"].startswith(f"[decay] {body['changed']}/{body['processed']} | tiers: ")
    assert http.get(body["status_url"]).json()["status"] == "succeeded"

    stats = http.get("/maintenance/stats").json()
    assert stats["compression"]["fingerprinted"] >= 1
    assert stats["recent_runs"][0]["id"] == body["id"]
    assert sum(stats["tiers"].values()) == stats["memories"]
    index = stats["index"]  # the fresh tier's backlog, every sector named
    assert list(index["fresh_by_sector"]) == list(SECTORS)
    assert index["fresh_vectors"] == sum(index["fresh_by_sector"].values())

    decayed = http.get(f"/memory/{old['id']}", params={"user_id": tenant}).json()
    assert decayed["compression"] == "fingerprinted" and decayed["tier"] == "cold"
    assert decayed["summary"] == "harbour ferry timetable" and decayed["content"] == old["content"]
    assert http.get(f"/memory/{fresh['id']}", params={"user_id": tenant}).json()["compression"] == "full"

    found = http.post("/memory/query", json={"query": "ferry timetable", "user_id": tenant}).json()
    assert found["matches"][0]["id"] == old["id"]  # found through its original words
    restored = wait_for(
        lambda: (
            (m := http.get(f"/memory/{old['id']}", params={"user_id": tenant}).json())["compression"] == "full" and m
        )
    )
    assert restored, "the worker should regenerate the fingerprinted hit"
    assert restored["tier"] == "warm" and restored["summary"] is None
    assert restored["salience"] == pytest.approx(decayed["salience"] + 0.5, abs=1e-4)  # the query's reinforcement
    with db.session() as s:
        dims = s.execute(text("SELECT DISTINCT dim FROM memory_vectors WHERE memory_id = :id"), {"id": old["id"]})
        assert dims.scalars().all() == [384]


@pytest.mark.parametrize(
    ("method", "path", "payload", "status", "fragment"),
    [
        ("post", "/maintenance/decay", {"ratio": 0}, 422, "ratio"),
        ("post", "/maintenance/decay", {"ratio": 1.5}, 422, "ratio"),
        ("post", "/maintenance/decay", {"ratio": "all"}, 422, "ratio"),
        ("post", "/maintenance/decay", {"everything": True}, 422, "everything"),
        ("get", f"/maintenance/decay/{uuid.uuid4()}", None, 404, "not found"),
        ("get", "/maintenance/decay/not-a-uuid", None, 422, "run_id"),
        ("get", "/maintenance/stats?runs=1000", None, 422, "runs"),
    ],
)
def test_bad_lifecycle_requests_get_a_clear_4xx(http, method, path, payload, status, fragment):
    response = http.request(method.upper(), path, json=payload)
    assert response.status_code == status, response.text
    assert fragment in response.text


def test_the_cli_runs_a_cycle_and_shows_the_stats(gateway, worker, monkeypatch):
    from typer.testing import CliRunner

    from services.cli.main import app

    monkeypatch.setenv("MNEMOFLOW_URL", gateway)
    runner = CliRunner()
    ran = runner.invoke(app, ["decay", "--ratio", "0.5"])
    assert ran.exit_code == 0, ran.output
    assert "[decay] " in ran.output and " segments" in ran.output
    shown = runner.invoke(app, ["stats", "--runs", "2"])
    assert shown.exit_code == 0, shown.output
    assert "tiers:       hot=" in shown.output and "operator  succeeded [decay]" in shown.output
    assert "fresh tier:  " in shown.output and " vectors waiting for the index" in shown.output
    refused = runner.invoke(app, ["decay", "--ratio", "0"])
    assert refused.exit_code != 0 and "above 0" in refused.output
