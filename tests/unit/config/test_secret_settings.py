"""The signing key and the metrics salt: required outside development, refused when weak, never echoed."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from shared.config import OpenAccessRefused, Settings

STRONG = "Xk3v9QpL2mZ7wR4tY8nB1cD6"


@pytest.fixture(autouse=True)
def _no_secrets_from_the_environment(monkeypatch):
    monkeypatch.delenv("MNEMOFLOW_SIGNING_KEY", raising=False)
    monkeypatch.delenv("MNEMOFLOW_METRICS_TENANT_SALT", raising=False)


@pytest.mark.parametrize("environment", ["production", "test"])
def test_outside_development_a_process_refuses_to_start_without_them(environment):
    settings = Settings(environment=environment)
    with pytest.raises(OpenAccessRefused, match="MNEMOFLOW_SIGNING_KEY and no MNEMOFLOW_METRICS_TENANT_SALT"):
        settings.require_secrets("the gateway", "signing_key", "metrics_tenant_salt")
    with pytest.raises(OpenAccessRefused, match=r"refusing to start a worker .* no MNEMOFLOW_SIGNING_KEY:"):
        settings.require_secrets("a worker", "signing_key")
    assert settings.signing_secret() is None and settings.tenant_salt() == ""  # nothing made up in its place
    given = Settings(environment=environment, signing_key=STRONG, metrics_tenant_salt=STRONG[::-1])
    given.require_secrets("the gateway", "signing_key", "metrics_tenant_salt")
    assert given.signing_secret() == STRONG.encode() and given.tenant_salt() == STRONG[::-1]


def test_a_blank_one_is_unset(monkeypatch):
    monkeypatch.setenv("MNEMOFLOW_SIGNING_KEY", "  ")
    monkeypatch.setenv("MNEMOFLOW_METRICS_TENANT_SALT", "")
    settings = Settings(environment="production")
    assert settings.signing_key is None and settings.metrics_tenant_salt is None
    with pytest.raises(OpenAccessRefused):
        settings.require_secrets("beat", "signing_key")


@pytest.mark.parametrize("variable", ["MNEMOFLOW_SIGNING_KEY", "MNEMOFLOW_METRICS_TENANT_SALT"])
@pytest.mark.parametrize("weak", ["000000000000", "changeme", "short-key", "abcabcabcabcabc", "a key with spaces!"])
@pytest.mark.parametrize("environment", ["development", "production"])
def test_a_weak_one_is_refused_in_every_environment_without_being_echoed(monkeypatch, variable, weak, environment):
    monkeypatch.setenv(variable, weak)
    with pytest.raises(ValidationError) as refused:
        Settings(environment=environment)
    assert variable in str(refused.value) and weak not in str(refused.value)
