"""Backup and restore with the `mnemoflow` command: the stack's store dumped while it runs, restored into a fresh
data dir (a new embedded server), gives back the same memories and the same answers; a store that is not empty is
refused without --force, and one in use always."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from infra.embedded import EmbeddedPostgres, free_port
from infra.processes import gateway_command, wait_healthy
from tests.conftest import ROOT, running, service_env
from tests.e2e.filled import answers, export, fill, total

pytestmark = pytest.mark.e2e


def mnemoflow(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli.main", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "MNEMOFLOW_DATA_DIR")}
    return env | {"MNEMOFLOW_ENVIRONMENT": "development", "MNEMOFLOW_EMBEDDING_PROVIDER": "synthetic"} | extra


def test_a_backup_restored_into_a_fresh_data_dir_answers_the_same(http, worker, servers, tenant, tmp_path: Path):
    fill(http, tenant)
    before, exported, stored = answers(http, tenant), export(http, tenant), total(http, tenant)
    dump = tmp_path / "store.dump"
    made = mnemoflow("backup", str(dump), env=_env(DATABASE_URL=servers["database_url"]))  # while the stack runs
    assert made.returncode == 0, made.stderr
    assert dump.stat().st_size > 0 and f"{dump}:" in made.stdout

    data_dir = tmp_path / "fresh"
    fresh = _env(MNEMOFLOW_DATA_DIR=str(data_dir))
    restored = mnemoflow("restore", str(dump), env=fresh)
    assert restored.returncode == 0, restored.stderr
    assert "restored:" in restored.stdout and "memories" in restored.stdout

    server = EmbeddedPostgres(data_dir / "pgdata")
    url = server.start()  # the command stopped the server it started; the stack would start it again
    try:
        env = service_env(servers, DATABASE_URL=url, REDIS_URL=servers["redis_url"].rsplit("/", 1)[0] + "/13")
        port = free_port()
        with running(gateway_command(host="127.0.0.1", port=port), env, tmp_path / "gateway.log") as proc:
            base = f"http://127.0.0.1:{port}"
            wait_healthy(base, proc, log_path=tmp_path / "gateway.log")
            with httpx.Client(base_url=base, timeout=30) as other:
                assert total(other, tenant) == stored
                assert export(other, tenant)[1:] == exported[1:]
                assert answers(other, tenant) == before
            in_use = mnemoflow("restore", str(dump), "--force", env=fresh)  # the gateway is connected
            assert in_use.returncode == 1 and "stop the stack first" in in_use.stderr
        refused = mnemoflow("restore", str(dump), env=fresh)
        assert refused.returncode == 1 and "not empty" in refused.stderr and "--force" in refused.stderr
        forced = mnemoflow("restore", str(dump), "--force", env=fresh)
        assert forced.returncode == 0, forced.stderr
    finally:
        server.stop()


def test_restore_refuses_what_is_not_a_backup(tmp_path: Path):
    junk = tmp_path / "notes.dump"
    junk.write_text("not a backup")
    refused = mnemoflow("restore", str(junk), env=_env(MNEMOFLOW_DATA_DIR=str(tmp_path / "data")))
    assert refused.returncode == 1 and "is not a backup made by `mnemoflow backup`" in refused.stderr
    assert not (tmp_path / "data").exists()  # nothing started, nothing made
