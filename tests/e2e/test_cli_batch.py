"""`mnemoflow batch` against the whole stack: a JSONL and a CSV file loaded with a progress bar, every item stored
once, a run again storing nothing twice, bad lines refused with their line number, sequences linked."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text
from typer.testing import CliRunner, Result

from services.cli.main import app

pytestmark = pytest.mark.e2e


def load(gateway: str, *args: str) -> Result:
    return CliRunner().invoke(app, ["batch", *args], env={"MNEMOFLOW_URL": gateway})


def stored(gateway: str, tenant: str) -> list[dict]:
    """Every memory of the tenant (contents and tags), read through the API."""
    items, offset = [], 0
    while True:
        page = httpx.get(f"{gateway}/memory/all", params={"user_id": tenant, "u": offset, "l": 1000}).json()
        items += page["items"]
        offset += len(page["items"])
        if not page["items"] or offset >= page["total"]:
            return items


def test_a_jsonl_and_a_csv_file_are_loaded_once_however_often_they_are_run(gateway, worker, tenant, tmp_path: Path):
    notes = tmp_path / "notes.jsonl"
    with notes.open("w") as out:
        for i in range(230):
            line = {"content": f"Harbour log entry {i}: tide at {i % 12} o'clock", "tags": ["log"]}
            out.write(json.dumps(line) + "\n")
    first = load(gateway, str(notes), "--user-id", tenant, "--batch-size", "50", "--tag", "import", "--parallel", "3")
    assert first.exit_code == 0, first.output
    assert "notes.jsonl: 230 items in 5 jobs" in first.output and "230 new memories" in first.output
    assert "batch notes.jsonl" in first.output  # the bar, as drawn last
    memories = stored(gateway, tenant)
    assert len(memories) == 230 and len({m["content"] for m in memories}) == 230
    assert all(sorted(m["tags"]) == ["import", "log"] for m in memories)

    again = load(gateway, str(notes), "--user-id", tenant, "--batch-size", "50", "--tag", "import")
    assert again.exit_code == 0, again.output
    assert "5 sent by an earlier run, not stored again" in again.output and "0 new memories" in again.output
    assert len(stored(gateway, tenant)) == 230

    table = tmp_path / "people.csv"
    with table.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["content", "tags", "occurred_at", "speaker"])
        for i in range(40):
            writer.writerow([f"Visitor {i} signed the guest book", "guests;2023", "2023-05-08", f"host {i % 3}"])
    loaded = load(gateway, str(table), "-u", tenant, "--batch-size", "25")
    assert loaded.exit_code == 0, loaded.output
    assert "people.csv: 40 items in 2 jobs" in loaded.output
    guests = [m for m in stored(gateway, tenant) if "guests" in m["tags"]]
    assert len(guests) == 40 and {m["occurred_at"] for m in guests} == {"2023-05-08T00:00:00Z"}
    assert {m["metadata"]["speaker"] for m in guests} == {"host 0", "host 1", "host 2"}
    assert load(gateway, str(table), "-u", tenant, "--batch-size", "25").exit_code == 0
    assert len(stored(gateway, tenant)) == 270


def test_a_bad_line_is_named_and_nothing_is_sent_unless_told_to_skip_it(gateway, worker, tenant, tmp_path: Path):
    notes = tmp_path / "notes.jsonl"
    notes.write_text('{"content": "first"}\n{"content": "second"}\n{"tags": ["no content"]}\n{"content": "fourth"}\n')
    refused = load(gateway, str(notes), "-u", tenant)
    assert refused.exit_code == 1
    assert "notes.jsonl line 3: content: Field required" in refused.output
    assert "nothing was sent" in refused.output
    assert stored(gateway, tenant) == []

    skipped = load(gateway, str(notes), "-u", tenant, "--skip-invalid")
    assert skipped.exit_code == 0, skipped.output
    assert "warning: notes.jsonl line 3" in skipped.output and "1 bad record left out" in skipped.output
    assert sorted(m["content"] for m in stored(gateway, tenant)) == ["first", "fourth", "second"]


def test_a_sequence_links_each_item_to_the_next(gateway, worker, tenant, db, tmp_path: Path):
    turns = tmp_path / "turns.jsonl"
    turns.write_text("".join(json.dumps(f"turn {i} of the conversation about the ferry") + "\n" for i in range(5)))
    result = load(gateway, str(turns), "-u", tenant, "--sequence")
    assert result.exit_code == 0, result.output
    with db.session() as session:
        links = session.execute(
            text("SELECT count(*) FROM waypoints WHERE kind = 'next' AND user_id = :u"), {"u": tenant}
        ).scalar_one()
    assert links == 4


def test_the_gateways_errors_end_a_load_readably(gateway, tmp_path: Path):
    notes = tmp_path / "notes.jsonl"
    notes.write_text('{"content": "a note"}\n')
    refused = load(gateway, str(notes), "-u", "_reserved")
    assert refused.exit_code == 1 and "error (422)" in refused.output and "user_id" in refused.output
    unreachable = CliRunner().invoke(app, ["batch", str(notes)], env={"MNEMOFLOW_URL": "http://127.0.0.1:9"})
    assert unreachable.exit_code == 1 and "could not be reached" in unreachable.output


def test_without_waiting_the_load_names_its_jobs(gateway, worker, tenant, tmp_path: Path):
    notes = tmp_path / "notes.jsonl"
    notes.write_text("".join(json.dumps({"content": f"unwaited note {i}"}) + "\n" for i in range(30)))
    sent = load(gateway, str(notes), "-u", tenant, "--batch-size", "20", "--no-wait")
    assert sent.exit_code == 0, sent.output
    assert "notes.jsonl: 30 items sent in 2 jobs (follow one: mnemoflow job ID)" in sent.output
    waited = load(gateway, str(notes), "-u", tenant, "--batch-size", "20")  # the same batches: their first jobs
    assert waited.exit_code == 0 and "2 sent by an earlier run" in waited.output, waited.output
    assert len(stored(gateway, tenant)) == 30
