"""`mnemoflow export`, `import`, `erase` and `cancel` against the running stack."""

from __future__ import annotations

import json
import uuid

import pytest
from typer.testing import CliRunner

from services.cli.main import app
from tests.conftest import wait_for_job

pytestmark = pytest.mark.e2e


def test_export_import_erase_and_cancel_from_the_command_line(gateway, http, worker, tenant, tmp_path):
    runner = CliRunner()
    env = {"MNEMOFLOW_URL": gateway}
    for content in ("The kettle is in the left cupboard", "The spare bulbs are under the stairs"):
        assert http.post("/memory/add", json={"content": content, "user_id": tenant}).status_code == 200
    target = tmp_path / "kitchen.jsonl"
    exported = runner.invoke(app, ["export", "--user-id", tenant, "-o", str(target)], env=env)
    assert exported.exit_code == 0, exported.output
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert lines[0]["user_id"] == tenant and lines[-1]["memories"] == 2
    assert not (tmp_path / "kitchen.jsonl.partial").exists()

    copy = f"{tenant}-copy"
    imported = runner.invoke(app, ["import", str(target), "--user-id", copy], env=env)
    assert imported.exit_code == 0, imported.output
    assert f"into '{copy}'" in imported.output and "stored: 2 new" in imported.output
    assert http.get("/memory/all", params={"user_id": copy}).json()["total"] == 2
    again = runner.invoke(app, ["import", str(target), "--user-id", copy], env=env)
    assert again.exit_code == 0, again.output
    assert "0 lines to store, 2 skipped, 0 stored under another id" in again.output, again.output
    assert "line 2: skipped: memory " in again.output and "is stored already (imported before)" in again.output

    unconfirmed = runner.invoke(app, ["erase", "--user-id", copy], env=env)
    assert unconfirmed.exit_code == 2 and "--yes" in unconfirmed.output
    erased = runner.invoke(app, ["erase", "--user-id", copy, "--yes"], env=env)
    assert erased.exit_code == 0 and "erased: 2 memories" in erased.output, erased.output
    assert http.get("/memory/all", params={"user_id": copy}).json()["total"] == 0

    batch = http.post("/memory/batch", json={"items": [{"content": f"a note {uuid.uuid4()}"}], "user_id": tenant})
    job_id = batch.json()["job_id"]
    wait_for_job(http, job_id, tenant)
    ended = runner.invoke(app, ["cancel", job_id, "--user-id", tenant], env=env)
    assert ended.exit_code == 1 and "error (409)" in ended.output and "already ended (succeeded)" in ended.output
