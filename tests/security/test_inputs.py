"""Bad input across routes, against the real gateway: user ids that cannot be a tenant, bodies over the limit sent
without a Content-Length, an idempotency key reused for another batch."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from sqlalchemy import text

from infra.embedded import free_port
from infra.processes import gateway_command, wait_healthy
from shared.api.common import MAX_OFFSET
from shared.db import schema_session
from tests.conftest import running, service_env

pytestmark = pytest.mark.e2e

MIB = 1024 * 1024


def _spaces(total: int, piece: int = 64 * 1024) -> Iterator[bytes]:
    """`total` bytes in pieces: httpx sends a generator body chunked, without a Content-Length."""
    sent = 0
    while sent < total:
        size = min(piece, total - sent)
        sent += size
        yield b" " * size


def _multipart(boundary: str, file_bytes: int) -> Iterator[bytes]:
    yield (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.txt"\r\n'
        "Content-Type: text/plain\r\n\r\n"
    ).encode()
    for piece in _spaces(file_bytes):
        yield piece.replace(b" ", b"a")
    yield f"\r\n--{boundary}--\r\n".encode()


def test_an_oversize_json_body_sent_chunked_gets_413_naming_the_limit(http):
    response = http.post(
        "/memory/add", content=_spaces(64 * MIB + 256 * 1024), headers={"content-type": "application/json"}
    )
    assert "content-length" not in response.request.headers
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert error["code"] == "payload_too_large" and "67,108,864 bytes" in error["message"]


def test_an_oversize_upload_sent_chunked_gets_413_naming_the_limit(http, tenant):
    # The test stack's uploads may be 2 MiB (MNEMOFLOW_INGEST_MAX_BYTES) plus 1 MiB of multipart framing.
    response = http.post(
        "/memory/ingest/file",
        params={"user_id": tenant},
        content=_multipart("b0undary", 4 * MIB),
        headers={"content-type": "multipart/form-data; boundary=b0undary"},
    )
    assert "content-length" not in response.request.headers
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert error["code"] == "payload_too_large" and f"{3 * MIB:,} bytes" in error["message"]


BAD_USER_IDS = ["_system", "alice bob", " alice", "a" * 257, "ålice", "alice~copy", "a/b"]
NO_SUCH = "00000000-0000-4000-8000-000000000000"
# Every route that takes a user id, with a request that is valid but for it: (method, path, where, request).
# `where` says where the user id goes: query, body, form, or a dotted path into the body.
USER_ID_ROUTES: list[tuple[str, str, str, dict]] = [
    ("post", "/memory/add", "body", {"content": "a note"}),
    ("post", "/memory/batch", "body", {"items": [{"content": "a note"}]}),
    ("post", "/memory/batch", "items.0", {"items": [{"content": "a note"}]}),
    ("post", "/memory/reinforce", "body", {"id": NO_SUCH}),
    ("post", "/memory/link", "body", {"src_id": NO_SUCH, "dst_id": "00000000-0000-4000-8000-000000000001"}),
    ("delete", "/memory/link", "query", {"src_id": NO_SUCH, "dst_id": "00000000-0000-4000-8000-000000000001"}),
    ("get", "/memory/{memory_id}/history", "query", {}),
    ("patch", "/memory/{memory_id}", "body", {"tags": ["x"]}),
    ("post", "/memory/query", "body", {"query": "a note"}),
    ("post", "/memory/query", "filters", {"query": "a note", "filters": {}}),
    ("post", "/memory/ingest", "body", {"content_type": "txt", "data": "a note"}),
    ("post", "/memory/ingest/url", "body", {"url": "https://example.com/a.html"}),
    ("post", "/memory/ingest/file", "form", {}),
    ("get", "/memory/all", "query", {}),
    ("get", "/memory/{memory_id}", "query", {}),
    ("delete", "/memory/{memory_id}", "query", {}),
    ("get", "/documents", "query", {}),
    ("get", "/documents/{document_id}", "query", {}),
    ("get", "/sectors", "query", {}),
    ("get", "/jobs/{job_id}", "query", {}),
    ("get", "/users/{user_id}/memories", "path", {}),
    ("get", "/users/{user_id}/summary", "path", {}),
    ("post", "/users/{user_id}/summary/regenerate", "path", {}),
    ("post", "/lgm/store", "body", {"node": "plan", "content": "a note"}),
    ("post", "/lgm/retrieve", "body", {"node": "plan"}),
    ("post", "/lgm/context", "body", {}),
    ("post", "/lgm/reflection", "body", {"content": "a note"}),
    ("post", "/jobs/{job_id}/cancel", "query", {}),
    ("delete", "/documents/{document_id}", "query", {}),
    ("get", "/export", "query", {}),
    ("post", "/import", "query", {}),
    ("post", "/maintenance/erase", "body", {}),
]
RULE = "1-256 characters of letters (A-Z, a-z), digits and - _ . @ :, not starting with _ (reserved)"


def _send(http, method: str, path: str, where: str, request: dict, user_id: str):
    url = path.format(memory_id=NO_SUCH, document_id=NO_SUCH, job_id=NO_SUCH, user_id=quote(user_id, safe=""))
    if where == "path":
        return http.request(method.upper(), url)
    if where == "query":
        return http.request(method.upper(), url, params={**request, "user_id": user_id})
    if where == "form":
        return http.post(url, data={"user_id": user_id}, files={"file": ("a.txt", b"a note about the harbour")})
    body = {**request}
    if where == "body":
        body["user_id"] = user_id
    elif where == "filters":
        body["filters"] = {**body["filters"], "user_id": user_id}
    else:  # items.0
        body["items"] = [{**body["items"][0], "user_id": user_id}]
    return http.request(method.upper(), url, json=body)


@pytest.mark.parametrize(("method", "path", "where", "request_"), USER_ID_ROUTES)
def test_a_bad_user_id_gets_422_saying_what_is_allowed_on_every_route(http, method, path, where, request_):
    for bad in BAD_USER_IDS:
        if where == "path" and "/" in bad:  # a slash names another path, whatever its encoding: 404, not this route
            continue
        response = _send(http, method, path, where, request_, bad)
        assert response.status_code == 422, (bad, response.text)
        error = response.json()["error"]
        assert error["code"] == "invalid_input" and RULE in error["message"], (bad, error)
        assert "user_id" in error["message"] or "user_id" in str(error.get("details")), (bad, error)


def test_the_routes_above_are_every_route_that_takes_a_user_id_and_each_declares_the_rule(http):
    spec = http.get("/openapi.json").json()
    found = set()
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                if parameter["name"] == "user_id":
                    assert parameter["in"] in ("query", "path")
                    _assert_rule(parameter["schema"], f"{method} {path} {parameter['in']}")
                    found.add((method, path, parameter["in"]))
            for content in operation.get("requestBody", {}).get("content", {}).values():
                for where in _user_id_fields(spec, content["schema"], f"{method} {path}"):
                    found.add((method, path, where))
    listed = {(m, p, w if w in ("query", "form", "path") else "body") for m, p, w, _ in USER_ID_ROUTES}
    assert found == listed


def _user_id_fields(spec: dict, schema: dict, where: str, seen: frozenset[str] = frozenset()) -> list[str]:
    """'body' or 'form' once per user_id property found anywhere in a request body's schema (refs followed)."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        if name in seen:
            return []
        return _user_id_fields(spec, spec["components"]["schemas"][name], where, seen | {name})
    found = []
    for key, value in schema.get("properties", {}).items():
        if key == "user_id":
            _assert_rule(value, where)
            found.append("form" if where.endswith("/memory/ingest/file") else "body")
        else:
            found += _user_id_fields(spec, value, where, seen)
    for key in ("items", "anyOf", "oneOf", "allOf"):
        part = schema.get(key)
        for sub in part if isinstance(part, list) else [part] if isinstance(part, dict) else []:
            found += _user_id_fields(spec, sub, where, seen)
    return found


def _assert_rule(schema: dict, where: str) -> None:
    from shared.api.common import USER_ID_PATTERN

    strings = [s for s in schema.get("anyOf", [schema]) if s.get("type") == "string"]
    assert strings and all(s.get("pattern") == USER_ID_PATTERN for s in strings), (where, schema)


# Numbers stored as PostgreSQL `real`: 5e-324 (a double, too small for a 32-bit float) was an underflow error in the
# database, a 500 (found by test_schemathesis.py).
TINY_NUMBER_ROUTES = [
    ("/memory/link", {"src_id": NO_SUCH, "dst_id": "00000000-0000-4000-8000-000000000001", "weight": 5e-324}),
    ("/memory/reinforce", {"id": NO_SUCH, "boost": 5e-324}),
    ("/memory/add", {"content": "a note", "salience": 5e-324}),
    ("/memory/add", {"content": "a note", "confidence": 5e-324}),
    ("/memory/batch", {"items": [{"content": "a note", "salience": 5e-324}]}),
    ("/maintenance/decay", {"ratio": 5e-324}),
]


@pytest.mark.parametrize(("path", "body"), TINY_NUMBER_ROUTES)
def test_a_number_too_small_for_a_32_bit_float_gets_422_naming_the_smallest(http, tenant, path, body):
    response = http.post(path, json=body if path.startswith("/maintenance") else body | {"user_id": tenant})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_input" and "too small to store as a 32-bit float" in error["message"], error
    assert "1e-38" in error["message"], error


def test_a_change_of_content_to_whitespace_gets_422_as_an_add_does(http, tenant):
    added = http.post("/memory/add", json={"content": "The boathouse key is blue", "user_id": tenant}).json()
    for content in ("   ", "\x1c"):  # was a 500: the route took it and the engine's own check failed
        response = http.patch(f"/memory/{added['id']}", json={"content": content, "user_id": tenant})
        assert response.status_code == 422, response.text
        assert "content must contain non-whitespace text" in response.json()["error"]["message"]
    assert http.get(f"/memory/{added['id']}", params={"user_id": tenant}).json()["content"] == added["content"]


def test_a_tag_filter_with_a_nul_gets_422_on_the_list_and_the_query(http, tenant):
    # PostgreSQL text cannot hold U+0000: the filter failed in the database, a 500 (found by test_schemathesis.py)
    listed = http.get("/memory/all", params={"user_id": tenant, "tags": ["ops", "a\x00b"]})
    queried = http.post("/memory/query", json={"query": "ops", "user_id": tenant, "filters": {"tags": ["a\x00b"]}})
    for response in (listed, queried):
        assert response.status_code == 422, response.text
        assert "NUL character" in response.json()["error"]["message"], response.text


def test_a_time_whose_utc_offset_postgresql_cannot_take_is_kept_as_the_same_instant(http, tenant):
    # ISO 8601 allows offsets to 23:59, PostgreSQL below 16:00: "+17:23" was an error in the database, a 500
    added = http.post(
        "/memory/add",
        json={"content": "The ferry left late", "occurred_at": "2023-05-08T18:16:41+17:23", "user_id": tenant},
    )
    assert added.status_code == 200, added.text
    assert added.json()["occurred_at"].replace("Z", "+00:00") == "2023-05-08T00:53:41+00:00"
    since = http.get("/memory/all", params={"user_id": tenant, "occurred_after": "2023-05-08T17:00:00+17:23"})
    assert since.status_code == 200 and [m["id"] for m in since.json()["items"]] == [added.json()["id"]], since.text


def test_a_time_outside_the_years_1_to_9999_in_utc_gets_422(http, tenant):
    # PostgreSQL stores such an instant, and reading it back failed (a 500)
    for when in ("0001-01-01T05:00:00+10:00", "9999-12-31T20:00:00-10:00"):
        added = http.post("/memory/add", json={"content": "An old note", "occurred_at": when, "user_id": tenant})
        listed = http.get("/memory/all", params={"user_id": tenant, "occurred_before": when})
        for response in (added, listed):
            assert response.status_code == 422, response.text
            assert "outside the years 1 to 9999 in UTC" in response.json()["error"]["message"], response.text


def test_a_stored_name_with_a_nul_gets_422(http, tenant):
    # PostgreSQL text cannot hold U+0000: each of these was a 500 (found by test_schemathesis.py)
    responses = []
    for field in ("filename", "content_type"):
        body = {"content_type": "txt", "data": "a note", "filename": "notes.txt", "user_id": tenant}
        body[field] = body[field] + "\x00"
        responses.append(http.post("/memory/ingest", json=body))
    responses.append(
        http.post(
            "/memory/ingest/file",
            data={"user_id": tenant, "content_type": "text/plain\x00"},
            files={"file": ("notes.txt", b"a note about the harbour")},
        )
    )
    items = [{"content": "a note"}]
    responses.append(http.post("/memory/batch", json={"items": items, "user_id": tenant, "idempotency_key": "k\x00"}))
    for response in responses:
        assert response.status_code == 422, response.text
        assert "NUL character" in response.json()["error"]["message"], response.text


OFFSET_ROUTES = [
    ("/memory/all", "u"),
    ("/documents", "offset"),
    ("/documents/" + NO_SUCH, "offset"),
    ("/maintenance/user-ids/memories", "u"),
]


@pytest.mark.parametrize(("path", "name"), OFFSET_ROUTES)
def test_an_offset_past_the_largest_gets_422_naming_it(http, tenant, path, name):
    params = {"stored_user_id": tenant} if path.startswith("/maintenance") else {"user_id": tenant}
    for offset in (MAX_OFFSET + 1, 2**64):  # past PostgreSQL's bigint was an out-of-range error, a 500
        response = http.get(path, params=params | {name: offset})
        assert response.status_code == 422, response.text
        assert f"less than or equal to {MAX_OFFSET}" in response.json()["error"]["message"]
    largest = http.get(path, params=params | {name: MAX_OFFSET})
    assert largest.status_code == (404 if NO_SUCH in path else 200), largest.text


def test_a_user_id_of_every_allowed_kind_works_end_to_end(http, tenant):
    user = f"{tenant}.copy:d30@Example-Org_1"
    added = http.post("/memory/add", json={"content": "The ferry to Texel leaves at nine", "user_id": user})
    assert added.status_code == 200 and added.json()["user_id"] == user
    found = http.post("/memory/query", json={"query": "ferry to Texel", "user_id": user}).json()["matches"]
    assert [m["id"] for m in found] == [added.json()["id"]]
    assert http.get("/memory/all", params={"user_id": user}).json()["total"] == 1


def test_an_idempotency_key_reused_for_another_batch_is_a_409_naming_the_key(http, tenant):
    items = [{"content": "Shipment 1 left the Rotterdam warehouse"}, {"content": "Shipment 2 left on Monday"}]
    first = http.post("/memory/batch", json={"items": items, "user_id": tenant, "idempotency_key": "nightly-1"})
    assert first.status_code == 202 and first.json()["status"] == "queued", first.text
    job_id = first.json()["job_id"]

    # The same batch spelt otherwise (key order, defaults given, spacing, the item's own user_id) is the same request.
    again = {"sequence": False, "idempotency_key": "nightly-1", "items": [{"tags": [], **i} for i in items]}
    again["items"][0]["user_id"] = tenant
    same = http.post(
        "/memory/batch",
        content=json.dumps(again | {"user_id": tenant}, indent=2),
        headers={"content-type": "application/json"},
    )
    assert same.status_code == 202 and same.json() | {"chunks": None} == first.json() | {
        "status": "existing",
        "chunks": None,
    }

    for changed in (
        {"items": [*items, {"content": "Shipment 3 left on Tuesday"}]},
        {"items": items[:1]},
        {"items": [items[1], items[0]]},
        {"items": [{**items[0], "tags": ["ops"]}, items[1]]},
        {"items": items, "sequence": True},
    ):
        refused = http.post("/memory/batch", json=changed | {"user_id": tenant, "idempotency_key": "nightly-1"})
        assert refused.status_code == 409, (changed, refused.text)
        error = refused.json()["error"]
        assert error["code"] == "conflict" and "idempotency_key 'nightly-1'" in error["message"]
        assert job_id in error["message"] and error["details"] == {"idempotency_key": "nightly-1", "job_id": job_id}

    other_tenant = http.post(
        "/memory/batch", json={"items": items[:1], "user_id": f"{tenant}-other", "idempotency_key": "nightly-1"}
    )
    assert other_tenant.status_code == 202 and other_tenant.json()["job_id"] != job_id  # a key is the tenant's own


OPERATOR_KEY = "operator-key-0123456789"
TENANT_KEY = "tenant-key-0123456789"


@pytest.fixture(scope="module")
def keyed(servers, tmp_path_factory):
    """A gateway with an operator key and a tenant key."""
    port = free_port()
    env = service_env(servers, MNEMOFLOW_API_KEYS=f"{TENANT_KEY}=keyed-tenant", MNEMOFLOW_ADMIN_API_KEY=OPERATOR_KEY)
    log_path = tmp_path_factory.mktemp("logs") / "keyed.log"
    with running(gateway_command(host="127.0.0.1", port=port), env, log_path) as proc:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc, log_path=log_path)
        yield url


def test_rows_of_a_user_id_stored_before_the_rule_stay_readable_with_the_operator_key(http, settings, tenant, keyed):
    added = http.post("/memory/add", json={"content": "Old tenant's note on harbour fees", "user_id": tenant}).json()
    legacy = f"legacy user~{uuid.uuid4().hex[:8]}"  # as a store made before the rule may hold
    _rename(settings, tenant, legacy)

    assert http.get("/memory/all", params={"user_id": legacy}).status_code == 422  # no request can name it

    with httpx.Client(base_url=keyed, timeout=30) as client:
        path, params = "/maintenance/user-ids/memories", {"stored_user_id": legacy}
        tenant_call = client.get(path, params=params, headers={"Authorization": f"Bearer {TENANT_KEY}"})
        assert tenant_call.status_code == 403
        page = client.get(path, params=params, headers={"Authorization": f"Bearer {OPERATOR_KEY}"})
        assert page.status_code == 200, page.text
        assert page.json()["total"] == 1 and page.json()["items"][0]["content"] == "Old tenant's note on harbour fees"
        assert page.json()["items"][0]["user_id"] == legacy

        report = client.get("/maintenance/user-ids", headers={"Authorization": f"Bearer {OPERATOR_KEY}"}).json()
        assert "not starting with _" in report["rule"]
        memories = report["tables"]["memories"]
        assert memories["rows"] >= 1 and (legacy in memories["examples"] or memories["user_ids"] > 5)
        assert client.get("/maintenance/user-ids", headers={"Authorization": f"Bearer {TENANT_KEY}"}).status_code == 403

    renamed = f"{tenant}-renamed"
    _rename(settings, legacy, renamed)
    assert http.get(f"/memory/{added['id']}", params={"user_id": renamed}).json()["content"] == added["content"]
    body = {"query": "harbour fees", "user_id": renamed, "explain": True}
    [match] = http.post("/memory/query", json=body).json()["matches"]
    assert match["id"] == added["id"]
    assert match["trace"]["dense_rank"] == 1 and match["trace"]["lexical_rank"] == 1  # vectors and terms moved too


def _rename(settings, old: str, new: str) -> None:
    """Move a tenant with the SQL that docs/configuration.md gives the operator (its section on user ids), run as
    the operator would, as DATABASE_URL's user (the tables' owner, whom row-level security does not bind)."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    section = docs.split("### User ids", 1)[1].split("\n#", 1)[0]
    block = section.split("```sql\n", 1)[1].split("```", 1)[0]
    statements = [s.strip() for s in block.split(";") if s.strip() not in ("", "BEGIN", "COMMIT")]
    assert len(statements) == 10  # SET CONSTRAINTS and one UPDATE per tenant table
    with schema_session(settings, "mnemoflow.tests.rename") as session:
        for statement in statements:
            session.execute(text(statement.replace("'OLD'", ":old").replace("'NEW'", ":new")), {"old": old, "new": new})
