"""A gateway that runs closed, as a deployment does: production, tenants' keys and the operator key configured."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from infra.embedded import free_port
from infra.processes import gateway_command, wait_healthy
from tests.conftest import running, service_env


@dataclass(frozen=True)
class Keys:
    """Two tenants and the operator of one closed gateway."""

    tenant_a: str
    key_a: str
    tenant_b: str
    key_b: str
    admin: str
    metrics_salt: str

    def env(self) -> dict[str, str]:
        return {
            "MNEMOFLOW_ENVIRONMENT": "production",
            "MNEMOFLOW_API_KEYS": f"{self.key_a}={self.tenant_a},{self.key_b}={self.tenant_b}",
            "MNEMOFLOW_ADMIN_API_KEY": self.admin,
            "MNEMOFLOW_METRICS_TENANT_SALT": self.metrics_salt,
        }


@pytest.fixture(scope="session")
def keys() -> Keys:
    suffix = uuid.uuid4().hex[:8]
    return Keys(
        tenant_a=f"alice-{suffix}",
        key_a=secrets.token_urlsafe(24),
        tenant_b=f"bob-{suffix}",
        key_b=secrets.token_urlsafe(24),
        admin=secrets.token_urlsafe(24),
        metrics_salt=secrets.token_urlsafe(24),
    )


@pytest.fixture(scope="session")
def closed_gateway(servers, keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The gateway under uvicorn in production with keys on; yields its base URL."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("logs") / "closed-gateway.log"
    with running(gateway_command(host="127.0.0.1", port=port), service_env(servers, **keys.env()), log_path) as proc:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc, log_path=log_path)
        yield url


def client(url: str, key: str | None = None) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"x-api-key": key} if key else {}, timeout=30)


@pytest.fixture
def stranger(closed_gateway: str) -> Iterator[httpx.Client]:
    with client(closed_gateway) as c:
        yield c


@pytest.fixture
def alice(closed_gateway: str, keys: Keys) -> Iterator[httpx.Client]:
    with client(closed_gateway, keys.key_a) as c:
        yield c


@pytest.fixture
def bob(closed_gateway: str, keys: Keys) -> Iterator[httpx.Client]:
    with client(closed_gateway, keys.key_b) as c:
        yield c


@pytest.fixture
def operator(closed_gateway: str, keys: Keys) -> Iterator[httpx.Client]:
    with client(closed_gateway, keys.admin) as c:
        yield c
