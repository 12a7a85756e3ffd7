"""Every route of the API, called under tenant A's key with tenant B's ids: 403 when it names B's user_id, 404 when
it only names B's objects, 403 (operator key) for store-wide routes. The routes come from the gateway's own
OpenAPI description, so a new route is called here without anyone adding it; a route whose parameters this test
cannot fill fails it, asking for a sample."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.e2e

OPEN_ROUTES = {("get", "/health")}  # a probe: answers anyone, with nothing but up or down (test_operator_routes)
# Answer any key with what is the same for every tenant (a configuration), naming no tenant and no object.
SHARED_ROUTES = {("get", "/lgm/config")}
OPERATOR = "MNEMOFLOW_ADMIN_API_KEY"
# Values for required fields whose type alone does not make a valid request.
SAMPLES: dict[str, Any] = {
    "content": "a probe from another tenant",
    "query": "diary",
    "url": "https://example.com/probe",
    "content_type": "text/plain",
    "data": "a probe from another tenant",
    "encoding": "text",
    "provider": "synthetic",
    "node": "observe",
}
UUID_FIELDS = {"memory_id": "memory", "id": "memory", "src_id": "memory", "dst_id": "memory", "follows": "memory"}


@pytest.fixture(scope="module")
def bobs(closed_gateway: str, keys) -> dict[str, Any]:
    """Tenant B's objects: two memories, a batch job, a document and its ingest job; and a secret in each."""
    secret = f"bob's secret {uuid.uuid4().hex}"
    with httpx.Client(base_url=closed_gateway, headers={"x-api-key": keys.key_b}, timeout=30) as bob:
        first = bob.post("/memory/add", json={"content": f"{secret}: the diary is under the mattress"}).json()
        second = bob.post("/memory/add", json={"content": f"{secret}: the spare key is in the shed"}).json()
        batch = bob.post("/memory/batch", json={"items": [{"content": f"{secret}: batch item"}]}).json()
        data = base64.b64encode(f"{secret}: a private document".encode()).decode()
        document = bob.post(
            "/memory/ingest", json={"content_type": "text/plain", "data": data, "encoding": "base64"}
        ).json()
    return {
        "tenant": keys.tenant_b,
        "secret": secret,
        "memory": first["id"],
        "other_memory": second["id"],
        "job": batch["job_id"],
        "document": document["document_id"],
        "run": str(uuid.uuid4()),  # decay runs belong to no tenant; their routes are the operator's
        "contents": {first["id"]: first, second["id"]: second},
    }


PATH_IDS = {"memory_id": "memory", "job_id": "job", "document_id": "document", "run_id": "run"}


class Request:
    """One call built from an operation of the OpenAPI description."""

    def __init__(self, doc: dict[str, Any], path: str, method: str, op: dict[str, Any], ids: dict[str, Any]) -> None:
        self.doc, self.method, self.ids = doc, method, ids
        self.names_tenant = False  # the operation takes a user_id somewhere
        self.names_objects = False  # the operation takes ids of stored objects
        self.url = path
        self.query: dict[str, Any] = {}
        for param in op.get("parameters", []):
            name = param["name"]
            if param["in"] == "path" and name == "user_id":  # /users/{user_id}/...: B's name in the path
                self.url = self.url.replace("{user_id}", ids["tenant"])
                self.names_tenant = True
            elif param["in"] == "path":
                assert name in PATH_IDS, f"{method.upper()} {path}: teach this test which of B's ids {name} takes"
                self.url = self.url.replace("{" + name + "}", ids[PATH_IDS[name]])
                self.names_objects = True
            elif name == "user_id":
                self.names_tenant = True
            elif param.get("required"):
                self.query[name] = self.value(name, param["schema"], f"{method.upper()} {path}")
        self.body: Any = None
        self.files: dict[str, Any] | None = None
        self.content: bytes | None = None
        content = op.get("requestBody", {}).get("content", {})
        if "application/x-ndjson" in content:  # an export to import: B's ids in it are never B's rows (aliased)
            self.content = _export_naming(ids)
        elif "application/json" in content:
            self.body = self.value("body", content["application/json"]["schema"], f"{method.upper()} {path}")
        elif "multipart/form-data" in content:
            form = self.value("form", content["multipart/form-data"]["schema"], f"{method.upper()} {path}")
            upload = form.pop("file")
            self.files = {"file": ("probe.txt", upload, "text/plain")}
            self.body = form
        elif content:
            raise AssertionError(f"{method.upper()} {path}: teach this test to send {list(content)}")

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        if "$ref" in schema:
            return self.resolve(self.doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]])
        options = [s for s in schema.get("anyOf", []) if s.get("type") != "null"]
        return self.resolve(options[0]) if options else schema

    def value(self, name: str, schema: dict[str, Any], where: str) -> Any:
        schema = self.resolve(schema)
        if schema.get("type") == "object" and "properties" in schema:
            required = set(schema.get("required", []))
            out = {}
            for prop, sub in schema["properties"].items():
                if prop == "user_id":
                    self.names_tenant = True
                    out[prop] = "B"
                    continue
                resolved = self.resolve(sub)
                wanted = prop in required or prop in SAMPLES or resolved.get("format") == "uuid"
                nested = resolved.get("type") == "object" and "user_id" in resolved.get("properties", {})
                if wanted or nested:
                    out[prop] = self.value(prop, resolved, where)
            return out
        if schema.get("type") == "array":
            return [self.value(name, schema.get("items", {}), where)]
        if schema.get("format") == "uuid":
            assert name in UUID_FIELDS, f"{where}: teach this test which of B's ids the field {name!r} takes"
            self.names_objects = True
            return self.ids[UUID_FIELDS[name]] if name != "dst_id" else self.ids["other_memory"]
        if schema.get("format") == "binary":
            return self.ids["secret"].encode()
        return self.sample(name, schema, where)

    def sample(self, name: str, schema: dict[str, Any], where: str) -> Any:
        if name.endswith("user_id"):  # another name for a tenant (an operator's stored_user_id): B
            return self.ids["tenant"]
        if name in SAMPLES:
            return SAMPLES[name]
        if "enum" in schema:
            return schema["enum"][0]
        defaults = {"string": "probe", "integer": 1, "number": 0.5, "boolean": False, "object": {}}
        assert schema.get("type") in defaults, f"{where}: teach this test a sample for {name!r} ({schema})"
        return defaults[schema["type"]]

    def send(self, client: httpx.Client, tenant: str | None) -> httpx.Response:
        """The call with every user_id set to `tenant`, or left out (None)."""
        query = dict(self.query)
        if self.names_tenant and tenant is not None:
            query["user_id"] = tenant
        body = _with_tenant(self.body, tenant)
        if self.content is not None:
            headers = {"content-type": "application/x-ndjson"}
            return client.request(self.method, self.url, params=query, content=self.content, headers=headers)
        if self.files is not None:
            return client.request(self.method, self.url, params=query, data=body, files=self.files)
        return client.request(self.method, self.url, params=query, json=body)


def _export_naming(ids: dict[str, Any]) -> bytes:
    """A file of the export format whose one memory has B's memory id (and B's secret nowhere)."""
    when = "2026-01-01T00:00:00+00:00"
    lines = [
        {
            "type": "header",
            "version": 1,
            "user_id": ids["tenant"],
            "exported_at": when,
            "mnemoflow": "0",
            "vectors": False,
        },
        {
            "type": "memory",
            "id": ids["memory"],
            "content": "a probe from another tenant",
            "primary_sector": "semantic",
            "sectors": ["semantic"],
            "salience": 0.5,
            "decay_lambda": 0.005,
            "created_at": when,
            "updated_at": when,
            "last_seen_at": when,
        },
        {"type": "end", "documents": 0, "memories": 1, "waypoints": 0},
    ]
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def _with_tenant(value: Any, tenant: str | None) -> Any:
    if isinstance(value, dict):
        return {
            k: (tenant if k == "user_id" else _with_tenant(v, tenant))
            for k, v in value.items()
            if not (k == "user_id" and tenant is None)
        }
    if isinstance(value, list):
        return [_with_tenant(v, tenant) for v in value]
    return value


def test_every_route_refuses_tenant_b_s_ids_under_tenant_a_s_key(operator, alice, bob, bobs, keys):
    doc = operator.get("/openapi.json").json()
    called = []
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            if (method, path) in OPEN_ROUTES:
                continue
            request = Request(doc, path, method, op, bobs)
            where = f"{method.upper()} {path}"
            outcomes = []
            if request.names_tenant:  # naming B's user_id: 403, whatever else it names
                outcomes.append(("names B", request.send(alice, keys.tenant_b), {403}))
            if request.names_objects:  # only B's objects, acting for A: B's objects do not exist for A
                outcomes.append(("B's ids", request.send(alice, None), {404, 403}))
            if (method, path) in SHARED_ROUTES:
                outcomes.append(("shared", request.send(alice, None), {200}))
            elif not (request.names_tenant or request.names_objects):  # store-wide: the operator's only
                outcomes.append(("store-wide", request.send(alice, None), {403}))
            for variant, response, allowed in outcomes:
                assert response.status_code in allowed, f"{where} ({variant}): {response.status_code} {response.text}"
                if response.status_code == 403 and variant != "names B":
                    assert OPERATOR in response.text, f"{where} ({variant}): a 403 other than the operator's"
                assert bobs["secret"] not in response.text, f"{where} ({variant}) showed B's data to A"
            called.append(where)
    assert len(called) >= 20 and "PATCH /memory/{memory_id}" in called and "POST /memory/ingest/file" in called
    assert {
        "GET /users/{user_id}/summary",
        "POST /lgm/store",
        "POST /memory/reinforce",
        "GET /export",
        "POST /import",
        "POST /jobs/{job_id}/cancel",
        "POST /maintenance/erase",
    } <= set(called)
    for memory_id, added in bobs["contents"].items():  # nothing A sent changed or removed B's memories
        kept = bob.get(f"/memory/{memory_id}")
        assert (
            kept.status_code == 200
            and kept.json()["content"] == added["content"]
            and kept.json()["status"] == ("active")
        )
