"""Whom a request's unit of work acts for: the tenant its principal resolved, the store once an operator's key was
required, and nobody before either (its session refuses to open)."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from services.gateway.deps import Principal
from services.gateway.state import GatewayState
from shared.errors import Forbidden


class Recorder:
    """A stand-in for a role's Database: records the sessions opened and for whom."""

    def __init__(self, role: str) -> None:
        self.role = role
        self.opened: list[tuple[str, str | None]] = []

    @contextlib.contextmanager
    def session(self, tenant: str | None = None) -> Any:
        self.opened.append((self.role, tenant))
        yield object()


def state() -> tuple[GatewayState, Recorder, Recorder]:
    app, maintenance = Recorder("app"), Recorder("maintenance")
    fields: dict[str, Any] = dict.fromkeys(
        ("settings", "engine", "retriever", "redis", "celery", "aftermath", "limiter", "health")
    )
    return GatewayState(db=app, maintenance=maintenance, **fields), app, maintenance  # type: ignore[arg-type]


def test_the_principal_decides_whom_the_work_is_for():
    anyone = Principal(None, "anonymous", is_admin=True)
    assert anyone.acting() == (None, False)
    anyone.require_admin()
    assert anyone.acting() == (None, True)  # store-wide
    assert anyone.tenant("alice") == "alice"
    assert anyone.acting() == ("alice", False)  # a tenant named: its rows only, operator or not
    with pytest.raises(Forbidden, match="conflicting"):
        anyone.tenant("bob")

    bound = Principal("alice", "anonymous")
    with pytest.raises(Forbidden):
        bound.require_admin()
    assert bound.acting() == (None, False)  # refused: not store-wide
    assert bound.tenant(None) == "alice" and bound.acting() == ("alice", False)


def test_the_unit_of_work_opens_as_the_principal_decided_by_its_first_statement():
    gateway, app, maintenance = state()
    principal = Principal(None, "anonymous", is_admin=True)
    with gateway.unit_of_work(acting=principal.acting) as work:
        principal.tenant("alice")  # decided after the unit began, before its first statement
        assert work.session is work.session  # one session
    assert app.opened == [("app", "alice")] and maintenance.opened == []

    principal = Principal(None, "anonymous", is_admin=True)
    with gateway.unit_of_work(acting=principal.acting) as work:
        principal.require_admin()
        _ = work.session
    assert maintenance.opened == [("maintenance", None)]


def test_a_unit_of_work_used_before_anyone_decided_refuses():
    gateway, app, maintenance = state()
    principal = Principal(None, "anonymous", is_admin=True)
    with (
        pytest.raises(RuntimeError, match="before it was known whom it acts for"),
        gateway.unit_of_work(acting=principal.acting) as work,
    ):
        _ = work.session
    assert app.opened == maintenance.opened == []
