"""Who may call `mnemoflow mcp` over HTTP: the keys it asks for, and the bearer check in front of the SDK's app."""

from __future__ import annotations

import pytest

from services.mcp.command import Refused, http_keys, is_loopback
from services.mcp.transport import BearerGuard

KEY = "k3y-of-tenant-alice-0123"


async def _app(scope, receive, send) -> None:  # never called: allows() alone is under test
    raise AssertionError


def _scope(*headers: tuple[bytes, bytes]) -> dict:
    return {"type": "http", "headers": list(headers)}


def test_a_server_with_a_key_asks_callers_for_that_key_wherever_it_runs():
    assert http_keys(environment="development", host="127.0.0.1", api_key=KEY) == [KEY]
    assert http_keys(environment="production", host="0.0.0.0", api_key=KEY) == [KEY]


def test_without_a_key_it_serves_only_on_loopback_in_development():
    assert http_keys(environment="development", host="127.0.0.1", api_key=None) == []
    assert http_keys(environment="development", host="::1", api_key=None) == []
    with pytest.raises(Refused, match=r"keyless MCP server on 0\.0\.0\.0"):
        http_keys(environment="development", host="0.0.0.0", api_key=None)
    for environment in ("test", "production"):
        with pytest.raises(Refused, match=f"MNEMOFLOW_ENVIRONMENT={environment} and no key"):
            http_keys(environment=environment, host="127.0.0.1", api_key=None)


def test_loopback_is_the_addresses_only_this_machine_reaches():
    assert all(is_loopback(host) for host in ("127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"))
    assert not any(is_loopback(host) for host in ("0.0.0.0", "::", "10.0.0.5", "example.org", ""))


def test_the_guard_lets_through_only_the_bearer_of_a_key():
    guard = BearerGuard(_app, [KEY])
    assert guard.allows(_scope((b"authorization", f"Bearer {KEY}".encode())))
    assert guard.allows(_scope((b"authorization", f"bearer {KEY}".encode())))  # the scheme is case-insensitive
    assert not guard.allows(_scope())
    assert not guard.allows(_scope((b"authorization", KEY.encode())))  # no scheme
    assert not guard.allows(_scope((b"authorization", f"Basic {KEY}".encode())))
    assert not guard.allows(_scope((b"authorization", f"Bearer {KEY}x".encode())))
    assert not guard.allows(_scope((b"authorization", b"Bearer ")))
    with pytest.raises(ValueError):
        BearerGuard(_app, [])
