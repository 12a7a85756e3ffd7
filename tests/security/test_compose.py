"""docker-compose.yml ships closed: keys, Flower's login, the broker's password and the task signing key required,
ports on loopback unless the operator says otherwise. There is no Docker daemon here: the file is read with PyYAML
and its variables interpolated the way Compose does (`${VAR}`, `${VAR:-default}`, `${VAR:?error}`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"
_VARIABLE = re.compile(r"\$\{(?P<name>\w+)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")
REQUIRED = ("MNEMOFLOW_API_KEYS", "MNEMOFLOW_ADMIN_API_KEY")
DEPLOYED = {
    "MNEMOFLOW_API_KEYS": "k" * 24 + "=alice",
    "MNEMOFLOW_ADMIN_API_KEY": "a" * 24,
    "FLOWER_BASIC_AUTH": "admin:" + "p" * 16,
    "MNEMOFLOW_REDIS_PASSWORD": "broker-password-0123456789",
    "MNEMOFLOW_SIGNING_KEY": "signing-key-0123456789abcdef",
    "MNEMOFLOW_METRICS_TENANT_SALT": "metrics-salt-0123456789abcdef",
}


class Missing(Exception):
    """A required variable is unset: Compose refuses to start anything, with this message."""


def interpolate(value: Any, env: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"] or "", match["arg"] or ""
        unset = name not in env or (op.startswith(":") and env[name] == "")
        if op.endswith("?") and unset:
            raise Missing(f"{name}: {arg}")
        if op.endswith("-") and unset:
            return arg
        return env.get(name, "")

    return _VARIABLE.sub(one, value)


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def _runs_mnemoflow(service: dict[str, Any]) -> bool:
    return service.get("image") == "mnemoflow:latest"


def test_every_mnemoflow_service_runs_in_production_with_both_keys_required(services):
    ours = {name: s for name, s in services.items() if _runs_mnemoflow(s)}
    assert {"gateway", "worker-semantic", "beat", "flower", "migrate"} <= set(ours)
    for name, service in ours.items():
        environment = service["environment"]
        assert environment["MNEMOFLOW_ENVIRONMENT"] == "production", name
        for variable in REQUIRED:
            with pytest.raises(Missing, match=variable):
                interpolate(environment[variable], {k: v for k, v in DEPLOYED.items() if k != variable})
            with pytest.raises(Missing, match=variable):
                interpolate(environment[variable], {**DEPLOYED, variable: ""})  # blank is not set
        deployed = interpolate(environment, DEPLOYED)
        assert {v: deployed[v] for v in REQUIRED} == {v: DEPLOYED[v] for v in REQUIRED}, name


def test_ports_are_published_on_loopback_unless_the_operator_says_otherwise(services):
    published = {name: s["ports"] for name, s in services.items() if s.get("ports")}
    assert set(published) == {"gateway", "flower"}  # PostgreSQL and Redis stay on Compose's own network
    for name, ports in published.items():
        for port in interpolate(ports, DEPLOYED):
            assert isinstance(port, str) and port.startswith("127.0.0.1:"), (name, port)
        for port in interpolate(ports, {**DEPLOYED, "MNEMOFLOW_PUBLISH_ADDRESS": "0.0.0.0"}):
            assert port.startswith("0.0.0.0:"), (name, port)


def test_flower_has_a_required_login(services):
    flower = services["flower"]
    with pytest.raises(Missing, match="FLOWER_BASIC_AUTH"):
        interpolate(flower, {k: v for k, v in DEPLOYED.items() if k != "FLOWER_BASIC_AUTH"})
    deployed = interpolate(flower, DEPLOYED)
    # Flower takes --basic_auth from FLOWER_BASIC_AUTH in its environment, or from its command line
    login = deployed["environment"].get("FLOWER_BASIC_AUTH") or next(
        (arg.split("=", 1)[1] for arg in deployed["command"] if arg.startswith("--basic_auth=")), None
    )
    assert login == DEPLOYED["FLOWER_BASIC_AUTH"]


def test_every_queue_has_a_worker_in_compose():
    from shared.jobs import ALL_QUEUES

    services = yaml.safe_load(COMPOSE.read_text())["services"]
    consumed: set[str] = set()
    sweepers = []
    for service in services.values():
        command = service.get("command") or []
        if "worker" in command and "-Q" in command:
            queues = set(command[command.index("-Q") + 1].split(","))
            consumed |= queues
            if "sweep" in queues:
                sweepers.append(queues)
    assert consumed == set(ALL_QUEUES)  # a queue nobody consumes (the sweeper's, say) silently stops its work
    # The sweeper shares its processes with nothing: behind a decay cycle or a transcription it would wait.
    assert sweepers == [{"sweep"}]


def _without(variable: str) -> dict[str, str]:
    return {k: v for k, v in DEPLOYED.items() if k != variable}


def test_the_broker_requires_a_password_and_every_service_connects_with_it(services):
    redis = services["redis"]
    for env in (_without("MNEMOFLOW_REDIS_PASSWORD"), {**DEPLOYED, "MNEMOFLOW_REDIS_PASSWORD": ""}):
        with pytest.raises(Missing, match="MNEMOFLOW_REDIS_PASSWORD"):
            interpolate(redis, env)
    deployed = interpolate(redis, DEPLOYED)
    # The server takes it from its environment ($$ is Compose's escape for a literal $): not on the host's `ps`.
    assert deployed["environment"]["REDISCLI_AUTH"] == DEPLOYED["MNEMOFLOW_REDIS_PASSWORD"]
    assert '--requirepass "$REDISCLI_AUTH"' in " ".join(deployed["command"]).replace("$$", "$")
    assert DEPLOYED["MNEMOFLOW_REDIS_PASSWORD"] not in " ".join(deployed["command"])
    ours = {name: s for name, s in services.items() if _runs_mnemoflow(s)}
    for name, service in ours.items():
        with pytest.raises(Missing, match="MNEMOFLOW_REDIS_PASSWORD"):
            interpolate(service["environment"]["REDIS_URL"], _without("MNEMOFLOW_REDIS_PASSWORD"))
        url = interpolate(service["environment"]["REDIS_URL"], DEPLOYED)
        assert url == f"redis://:{DEPLOYED['MNEMOFLOW_REDIS_PASSWORD']}@redis:6379/0", name


def test_every_service_but_flower_requires_the_signing_key_and_flower_holds_none(services):
    ours = {name: s for name, s in services.items() if _runs_mnemoflow(s)}
    for name, service in ours.items():
        environment = service["environment"]
        if name == "flower":  # it sends no task: a task it was asked to run through its API is refused
            assert "MNEMOFLOW_SIGNING_KEY" not in environment
            continue
        for variable in ("MNEMOFLOW_SIGNING_KEY", "MNEMOFLOW_METRICS_TENANT_SALT"):
            with pytest.raises(Missing, match=variable):
                interpolate(environment[variable], _without(variable))
            assert interpolate(environment[variable], DEPLOYED) == DEPLOYED[variable], name


def test_flower_runs_with_its_metrics_behind_its_login(services):
    assert services["flower"]["command"][:3] == ["python", "-m", "workers.flower"]
