"""What the embedded stack writes is its user's only: Valkey's password (made once, the same after a restart), its
data dir, append-only file, config and log, the stack's secrets and its processes' logs."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest
import redis

from infra.embedded import EmbeddedRedis
from services.cli.children import ProcessChild
from shared.config.secrets import kept_secret

pytestmark = pytest.mark.integration


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_embedded_valkey_keeps_its_password_and_its_files_private(tmp_path: Path) -> None:
    data = tmp_path / "valkey"
    data.mkdir(mode=0o755)
    (data / "valkey.log").write_text("what an older, open version logged\n")
    (data / "valkey.log").chmod(0o644)  # left open by an older version: tightened at the next start
    server = EmbeddedRedis(data, persist=True)
    url = server.start()
    try:
        password = (data / "password").read_text().strip()
        assert len(password) >= 32 and url == f"redis://:{password}@127.0.0.1:{server.port}/0"
        client = redis.Redis.from_url(url)
        client.set("mnemoflow:probe", "a tenant's text")
        client.execute_command("BGREWRITEAOF")
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(host="127.0.0.1", port=server.port).get("mnemoflow:probe")
    finally:
        server.stop()
    files = [p for p in data.rglob("*") if p.is_file()]
    assert any("appendonly" in p.name for p in files), sorted(p.name for p in files)
    assert mode(data) == 0o700
    assert {p.name: mode(p) for p in data.rglob("*") if p.is_dir()} == {
        p.name: 0o700 for p in data.rglob("*") if p.is_dir()
    }
    assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}

    again = EmbeddedRedis(data, port=server.port, persist=True)
    try:
        assert again.start() == url  # the same password and port: the children's REDIS_URL stays valid
        assert redis.Redis.from_url(url).get("mnemoflow:probe") == b"a tenant's text"
    finally:
        again.stop()


def test_a_kept_secret_is_made_once_mode_0600(tmp_path: Path) -> None:
    first = kept_secret(tmp_path / "secrets", "signing-key")
    assert kept_secret(tmp_path / "secrets", "signing-key") == first and len(first) >= 32
    assert mode(tmp_path / "secrets") == 0o700 and mode(tmp_path / "secrets" / "signing-key") == 0o600
    assert kept_secret(tmp_path / "secrets", "metrics-tenant-salt") != first
    assert sorted(p.name for p in (tmp_path / "secrets").iterdir()) == ["metrics-tenant-salt", "signing-key"]


def test_the_stack_writes_its_processes_logs_for_its_user_only(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir(mode=0o755)
    log_path = logs / "worker.log"
    log_path.write_text("an older run's lines\n")
    log_path.chmod(0o644)
    child = ProcessChild("worker", ["platform"], {"PATH": "/usr/bin:/bin"}, log_path)
    child.start()
    assert child.process is not None and child.process.wait(timeout=60) == 0, sys.executable
    assert mode(logs) == 0o700 and mode(log_path) == 0o600
    assert log_path.read_text().startswith("an older run's lines\n")  # appended, as before


def test_in_development_the_secrets_are_made_once_in_the_data_dir(tmp_path: Path, monkeypatch) -> None:
    from shared.config import Settings

    monkeypatch.delenv("MNEMOFLOW_SIGNING_KEY", raising=False)
    monkeypatch.delenv("MNEMOFLOW_METRICS_TENANT_SALT", raising=False)
    data_dir = tmp_path / "stack"
    first = Settings(environment="development", data_dir=data_dir)
    key, salt = first.signing_secret(), first.tenant_salt()
    assert key and salt and key.decode() != salt
    again = Settings(environment="development", data_dir=data_dir)
    assert (again.signing_secret(), again.tenant_salt()) == (key, salt)  # the same after a restart
    secrets_dir = data_dir / "secrets"
    assert mode(secrets_dir) == 0o700 and {p.name: mode(p) for p in secrets_dir.iterdir()} == {
        "signing-key": 0o600,
        "metrics-tenant-salt": 0o600,
    }
