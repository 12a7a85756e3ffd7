"""Outside development nothing starts open: the gateway, the workers and `mnemoflow up` refuse to start without
the tenants' keys and the operator key, at once and saying which variables to set."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from infra.embedded import free_port
from infra.processes import gateway_command
from tests.conftest import running, service_env, worker_args

pytestmark = pytest.mark.e2e

BOTH = ("MNEMOFLOW_API_KEYS", "MNEMOFLOW_ADMIN_API_KEY")
TENANT_KEYS = "tenant-key-0123456789abcdef=alice"
OPERATOR_KEY = "operator-key-0123456789abcdef"


def _exit(args: list[str], env: dict[str, str], log_path: Path) -> tuple[int, str]:
    """Run a process to its end (it must end by itself); its exit code and output."""
    with running(args, env, log_path) as proc:
        try:
            code = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{args[0:3]} started instead of refusing:\n{log_path.read_text()[-3000:]}") from None
    return code, log_path.read_text()


def _closed_env(servers, **extra: str) -> dict[str, str]:
    env = service_env(servers, **({"MNEMOFLOW_ENVIRONMENT": "production"} | extra))
    for name in (*BOTH, "OM_API_KEY", "FLOWER_BASIC_AUTH"):
        if name not in extra:
            env.pop(name, None)
    return env


@pytest.mark.parametrize("environment", ["production", "test"])
def test_the_gateway_refuses_to_start_without_keys(servers, tmp_path, environment):
    env = _closed_env(servers, MNEMOFLOW_ENVIRONMENT=environment)
    code, log = _exit(gateway_command(host="127.0.0.1", port=free_port()), env, tmp_path / "gateway.log")
    assert code != 0
    assert "refusing to start the gateway" in log and all(name in log for name in BOTH), log[-3000:]


def test_the_gateway_refuses_tenant_keys_without_the_operator_key(servers, tmp_path):
    env = _closed_env(servers, MNEMOFLOW_API_KEYS=TENANT_KEYS)
    code, log = _exit(gateway_command(host="127.0.0.1", port=free_port()), env, tmp_path / "gateway.log")
    assert code != 0 and "no MNEMOFLOW_ADMIN_API_KEY:" in log, log[-3000:]


def test_a_worker_refuses_to_start_without_keys(servers, tmp_path):
    code, log = _exit(worker_args("closed-worker"), _closed_env(servers), tmp_path / "worker.log")
    assert code != 0 and all(name in log for name in BOTH), log[-3000:]


def test_mnemoflow_up_refuses_to_start_anything_without_keys(servers, tmp_path):
    data_dir = tmp_path / "stack"
    up = ["services.cli.main", "up", "--data-dir", str(data_dir), "--port", str(free_port())]
    env = _closed_env(servers)
    for name in ("DATABASE_URL", "REDIS_URL"):  # it would start embedded servers: it must not get that far
        env.pop(name)
    code, log = _exit(up, env, tmp_path / "up.log")
    assert code == 2 and all(name in log for name in BOTH), log
    assert not data_dir.exists()  # nothing was started, not even the data directory


def test_mnemoflow_up_refuses_flower_without_its_login(servers, tmp_path):
    data_dir = tmp_path / "stack"
    up = ["services.cli.main", "up", "--data-dir", str(data_dir), "--port", str(free_port())]
    env = _closed_env(servers, MNEMOFLOW_API_KEYS=TENANT_KEYS, MNEMOFLOW_ADMIN_API_KEY=OPERATOR_KEY)
    code, log = _exit(up, env, tmp_path / "up.log")
    assert code == 2 and "FLOWER_BASIC_AUTH" in log and "--no-flower" in log, log
    assert not data_dir.exists()


@pytest.mark.parametrize("process", ["worker", "beat"])
def test_a_worker_and_beat_refuse_to_start_without_the_signing_key(servers, tmp_path, process):
    env = _closed_env(servers, MNEMOFLOW_API_KEYS=TENANT_KEYS, MNEMOFLOW_ADMIN_API_KEY=OPERATOR_KEY)
    env.pop("MNEMOFLOW_SIGNING_KEY")
    args = (
        worker_args("unsigned-worker")
        if process == "worker"
        else ["celery", "-A", "workers.app", "beat", "-s", str(tmp_path / "schedule")]
    )
    code, log = _exit(args, env, tmp_path / f"{process}.log")
    assert code != 0 and "no MNEMOFLOW_SIGNING_KEY" in log, log[-3000:]


def test_the_gateway_refuses_to_start_without_the_signing_key_or_the_metrics_salt(servers, tmp_path):
    env = _closed_env(servers, MNEMOFLOW_API_KEYS=TENANT_KEYS, MNEMOFLOW_ADMIN_API_KEY=OPERATOR_KEY)
    for name in ("MNEMOFLOW_SIGNING_KEY", "MNEMOFLOW_METRICS_TENANT_SALT"):
        env.pop(name)
    code, log = _exit(gateway_command(host="127.0.0.1", port=free_port()), env, tmp_path / "gateway.log")
    assert code != 0 and "no MNEMOFLOW_SIGNING_KEY and no MNEMOFLOW_METRICS_TENANT_SALT" in log, log[-3000:]
