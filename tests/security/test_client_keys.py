"""The Python client against a gateway run closed: the key decides the tenant, another tenant's user_id is Forbidden,
no key is Unauthorized, and the operator routes take the operator key only."""

from __future__ import annotations

import pytest
from mnemoflow_client import Forbidden, Mnemoflow, Unauthorized

from tests.security.conftest import Keys

pytestmark = pytest.mark.e2e


def test_the_key_decides_the_tenant_and_another_tenants_user_id_is_forbidden(closed_gateway: str, keys: Keys):
    with Mnemoflow(closed_gateway, api_key=keys.key_a) as alice:
        memory = alice.add("alice's note for the client test")
        assert memory.user_id == keys.tenant_a
        assert alice.get(memory.id).id == memory.id
        with pytest.raises(Forbidden) as refused:
            alice.add("a note for bob", user_id=keys.tenant_b)
    assert refused.value.status == 403 and refused.value.code == "forbidden"
    assert keys.tenant_b in refused.value.message and refused.value.request_id
    with Mnemoflow(closed_gateway, api_key=keys.key_a, user_id=keys.tenant_b) as mistaken, pytest.raises(Forbidden):
        mistaken.list_memories()


def test_no_key_is_unauthorized_and_a_tenants_key_cannot_act_as_operator(closed_gateway: str, keys: Keys):
    with Mnemoflow(closed_gateway, api_key="") as stranger, pytest.raises(Unauthorized) as unknown:
        stranger.list_memories()
    assert unknown.value.status == 401
    with Mnemoflow(closed_gateway, api_key=keys.key_a) as alice, pytest.raises(Forbidden):
        alice.stats()
    with Mnemoflow(closed_gateway, api_key=keys.admin) as operator:
        assert "tiers" in operator.stats(runs=1)
        assert operator.health()["workers"] is not None
