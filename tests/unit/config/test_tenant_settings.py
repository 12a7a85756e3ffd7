"""Tenants named in the settings (API keys' tenants, the default tenant) follow the user id rule."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from shared.config import Settings


@pytest.mark.parametrize("tenant", ["a b", "_system", "ålice", "x" * 257])
def test_an_api_key_bound_to_a_name_no_request_could_use_is_refused(monkeypatch, tenant):
    monkeypatch.setenv("MNEMOFLOW_API_KEYS", f"k1-aaaaaaaaaaaa=alice,k2-bbbbbbbbbbbb={tenant}")
    with pytest.raises(ValidationError, match="MNEMOFLOW_API_KEYS: a user_id is 1-256 characters"):
        Settings()


@pytest.mark.parametrize("tenant", ["a b", "_anonymous", "", "user~1"])
def test_a_default_tenant_no_request_could_name_is_refused(monkeypatch, tenant):
    monkeypatch.setenv("MNEMOFLOW_DEFAULT_USER_ID", tenant)
    with pytest.raises(ValidationError, match="MNEMOFLOW_DEFAULT_USER_ID: a user_id is 1-256 characters"):
        Settings()


def test_plain_names_are_kept(monkeypatch):
    monkeypatch.setenv("MNEMOFLOW_API_KEYS", "k1-aaaaaaaaaaaa=alice@example.com,k2-bbbbbbbbbbbb=org:bob")
    monkeypatch.setenv("MNEMOFLOW_DEFAULT_USER_ID", "guest.1")
    settings = Settings()
    assert settings.all_api_keys == {"k1-aaaaaaaaaaaa": "alice@example.com", "k2-bbbbbbbbbbbb": "org:bob"}
    assert settings.default_user_id == "guest.1"


def test_a_refused_key_setting_does_not_print_the_keys(monkeypatch):
    monkeypatch.setenv("MNEMOFLOW_API_KEYS", "k1-aaaaaaaaaaaa=alice,k2-secretsecret=_bad")
    with pytest.raises(ValidationError) as refused:
        Settings()
    assert "k2-secretsecret" not in str(refused.value) and "k1-aaaaaaaaaaaa" not in str(refused.value)
