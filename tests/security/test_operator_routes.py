"""What a closed gateway shows to whom: /metrics and the API description to the operator only, /health to anyone
but only whether it is up, and tenants on /metrics only as hashes."""

from __future__ import annotations

import pytest

from shared.text import opaque_label

pytestmark = pytest.mark.e2e

OPERATOR_ONLY = ("/metrics", "/openapi.json", "/docs", "/redoc")


@pytest.mark.parametrize("path", OPERATOR_ONLY)
def test_metrics_and_the_api_description_need_the_operator_key(path, stranger, alice, operator):
    anonymous = stranger.get(path)
    assert anonymous.status_code == 401 and "API key" in anonymous.json()["error"]["message"]
    wrong = stranger.get(path, headers={"authorization": "Bearer not-a-key-of-this-server"})
    assert wrong.status_code == 401
    tenant = alice.get(path)
    assert tenant.status_code == 403 and "MNEMOFLOW_ADMIN_API_KEY" in tenant.json()["error"]["message"]
    allowed = operator.get(path)
    assert allowed.status_code == 200, allowed.text
    assert {"/metrics": "mnemoflow_http_requests_total", "/openapi.json": '"/memory/query"'}.get(
        path, "/openapi.json"
    ) in allowed.text


def test_health_answers_a_probe_without_a_key_and_tells_it_nothing_else(stranger, alice, operator):
    probe = stranger.get("/health")
    assert probe.status_code == 200
    body = probe.json()  # up or down, nothing else: no version, no model, no worker's error
    assert set(body) == {"ok", "database", "broker", "workers"} and all(
        set(body[k]) == {"ok"} for k in set(body) - {"ok"}
    )
    assert body["database"]["ok"] is True and body["broker"]["ok"] is True
    assert set(stranger.get("/health", headers={"x-api-key": "not-a-key-of-this-server"}).json()) == set(body)
    for caller in (alice, operator):  # a caller with a key learns the version and the embedding model
        detail = caller.get("/health").json()
        assert detail["version"] and detail["embedding"]["provider"] == "synthetic"
    assert set(alice.get("/health").json()["workers"]) == {"ok"}  # which workers fail, and why, is the operator's
    assert {"ready", "queues", "failing"} <= set(operator.get("/health").json()["workers"])


def test_tenants_appear_on_metrics_only_as_a_salted_hash(alice, bob, operator, keys):
    for tenant in (alice, bob):
        assert tenant.post("/memory/query", json={"query": "what is on the shopping list?"}).status_code == 200
    metrics = operator.get("/metrics").text
    assert keys.tenant_a not in metrics and keys.tenant_b not in metrics
    assert "alice" not in metrics and "bob" not in metrics
    series = [line for line in metrics.splitlines() if line.startswith("mnemoflow_tenant_queries_total{")]
    for name in (keys.tenant_a, keys.tenant_b):
        label = opaque_label(name, keys.metrics_salt)
        assert any(f'tenant="{label}"' in line for line in series), (label, series)
