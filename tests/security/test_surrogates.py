"""Text the store cannot hold, on every route that takes text, against the real gateway: a lone UTF-16 surrogate
(no UTF-8 form) or a NUL (PostgreSQL text cannot hold it) in a JSON field, a metadata key, a query parameter, a
form field or an import line is a 422 that names the field, the connection stays open, and nothing is stored.
Before, the JSON routes answered 500 and closed the keep-alive connection; batch and import stored the text
altered."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

pytestmark = pytest.mark.e2e

SURROGATE, NUL = "\ud800", "\x00"
BAD = {"surrogate": SURROGATE, "nul": NUL}


def _json(http: httpx.Client, method: str, path: str, body: Any, *, raw: bool = False, **kwargs: Any):
    """Send `body` as JSON: a surrogate as its escape ("\\ud800"), or (`raw`) as the three bytes a lax encoder
    writes for it (json.loads reads both)."""
    content = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass") if raw else json.dumps(body)
    return http.request(method, path, content=content, headers={"content-type": "application/json"}, **kwargs)


def _stored(maintenance, tenant: str) -> dict[str, int]:
    with maintenance.session() as session:
        return {
            table: session.execute(text(f"SELECT count(*) FROM {table} WHERE user_id = :u"), {"u": tenant}).scalar()
            for table in ("memories", "documents", "jobs")
        }


def _export(tenant: str, memory: dict[str, Any]) -> bytes:
    now = "2026-01-01T00:00:00+00:00"
    lines = [
        {"type": "header", "format": "mnemoflow-export", "version": 1, "user_id": tenant, "exported_at": now,
         "mnemoflow": "0", "vectors": False},
        {"type": "memory", "id": str(uuid.uuid4()), "primary_sector": "semantic", "sectors": ["semantic"],
         "salience": 0.5, "decay_lambda": 0.01, "created_at": now, "updated_at": now, "last_seen_at": now}
        | memory,
        {"type": "end", "documents": 0, "memories": 1, "waypoints": 0},
    ]  # fmt: skip
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


Send = Callable[[httpx.Client, str, str], httpx.Response]
# (route, the field the answer must name, how to send `bad` in it for a tenant)
JSON_CASES: list[tuple[str, str, Callable[[str, str], tuple[str, str, dict]]]] = [
    ("/memory/add", "content", lambda t, b: ("post", "/memory/add", {"content": f"a note{b}", "user_id": t})),
    ("/memory/add", "metadata.note", lambda t, b: ("post", "/memory/add", {
        "content": "a note", "metadata": {"note": f"x{b}"}, "user_id": t})),
    ("/memory/add", "metadata.deep.1.k", lambda t, b: ("post", "/memory/add", {
        "content": "a note", "metadata": {"deep": ["fine", {"k": b}]}, "user_id": t})),
    ("/memory/add", "tags.1", lambda t, b: ("post", "/memory/add", {
        "content": "a note", "tags": ["ok", f"t{b}"], "user_id": t})),
    ("/memory/batch", "items.1.content", lambda t, b: ("post", "/memory/batch", {
        "items": [{"content": "first"}, {"content": f"second{b}"}], "user_id": t})),
    ("/memory/batch", "items.0.metadata.note", lambda t, b: ("post", "/memory/batch", {
        "items": [{"content": "first", "metadata": {"note": b}}], "user_id": t, "idempotency_key": "k"})),
    ("/memory/batch", "items.0.tags.0", lambda t, b: ("post", "/memory/batch", {
        "items": [{"content": "first", "tags": [b]}], "user_id": t})),
    ("/memory/query", "query", lambda t, b: ("post", "/memory/query", {"query": f"boats{b}", "user_id": t})),
    ("/memory/query", "filters.tags.0", lambda t, b: ("post", "/memory/query", {
        "query": "boats", "filters": {"tags": [f"x{b}"]}, "user_id": t})),
    ("/lgm/store", "content", lambda t, b: ("post", "/lgm/store", {"node": "observe", "content": b, "user_id": t})),
    ("/lgm/store", "metadata.note", lambda t, b: ("post", "/lgm/store", {
        "node": "observe", "content": "seen", "metadata": {"note": b}, "user_id": t})),
    ("/lgm/store", "tags.0", lambda t, b: ("post", "/lgm/store", {
        "node": "observe", "content": "seen", "tags": [b], "user_id": t})),
    ("/lgm/retrieve", "query", lambda t, b: ("post", "/lgm/retrieve", {"node": "observe", "query": b, "user_id": t})),
    ("/lgm/reflection", "content", lambda t, b: ("post", "/lgm/reflection", {"content": b, "user_id": t})),
    ("/memory/ingest", "data", lambda t, b: ("post", "/memory/ingest", {
        "content_type": "txt", "data": f"a note{b}", "user_id": t})),
    ("/memory/ingest", "metadata.note", lambda t, b: ("post", "/memory/ingest", {
        "content_type": "txt", "data": "a note", "metadata": {"note": b}, "user_id": t})),
    ("/memory/ingest", "filename", lambda t, b: ("post", "/memory/ingest", {
        "content_type": "txt", "data": "a note", "filename": f"n{b}.txt", "user_id": t})),
    ("/memory/ingest/url", "url", lambda t, b: ("post", "/memory/ingest/url", {
        "url": f"https://example.com/{b}", "user_id": t})),
    ("/memory/ingest/url", "metadata.note", lambda t, b: ("post", "/memory/ingest/url", {
        "url": "https://example.com/", "metadata": {"note": b}, "user_id": t})),
]  # fmt: skip


def _refused(response: httpx.Response, field: str, bad: str) -> None:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_input" and f"`{field}`" in error["message"], error
    assert ("NUL character" if bad == NUL else "lone surrogate (U+D800)") in error["message"], error
    assert error["details"]["field"] == field and error["details"]["code_point"] == f"U+{ord(bad):04X}", error


@pytest.mark.parametrize("raw", [False, True], ids=["escaped", "raw-bytes"])
@pytest.mark.parametrize("bad", list(BAD.values()), ids=list(BAD))
@pytest.mark.parametrize(("route", "field", "build"), JSON_CASES, ids=[f"{r}:{f}" for r, f, _ in JSON_CASES])
def test_a_json_field_with_unstorable_text_is_a_422_naming_it_and_nothing_is_stored(
    http, maintenance, tenant, route, field, build, bad, raw
):
    if raw and bad == NUL:
        pytest.skip("a NUL has one spelling in JSON")
    method, path, body = build(tenant, bad)
    _refused(_json(http, method, path, body, raw=raw), field, bad)
    assert http.get("/health").status_code in (200, 503)  # the same keep-alive connection still serves
    assert _stored(maintenance, tenant) == {"memories": 0, "documents": 0, "jobs": 0}


@pytest.mark.parametrize("bad", list(BAD.values()), ids=list(BAD))
@pytest.mark.parametrize("field", ["content", "metadata.note", "tags.0"])
def test_a_change_with_unstorable_text_is_a_422_and_the_memory_is_unchanged(http, tenant, field, bad):
    added = http.post("/memory/add", json={"content": "The boathouse key is blue", "user_id": tenant}).json()
    body: dict[str, Any] = {"user_id": tenant}
    if field == "content":
        body["content"] = f"The key is red{bad}"
    elif field == "tags.0":
        body["tags"] = [bad]
    else:
        body["metadata"] = {"note": bad}
    _refused(_json(http, "patch", f"/memory/{added['id']}", body), field, bad)
    after = http.get(f"/memory/{added['id']}", params={"user_id": tenant}).json()
    assert (after["content"], after["tags"], after["metadata"]) == (added["content"], [], {})


def test_a_metadata_key_with_a_surrogate_is_named_escaped(http, maintenance, tenant):
    body = {"content": "a note", "metadata": {f"k{SURROGATE}": 1}, "user_id": tenant}
    response = _json(http, "post", "/memory/add", body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert "`metadata.k\\ud800` has a key that holds a lone surrogate (U+D800) at character 2" in error["message"]
    assert _stored(maintenance, tenant)["memories"] == 0


@pytest.mark.parametrize(
    ("path", "query", "field", "says"),
    [
        ("/memory/all", "tags=ok&tags=a%00b", "tags", "NUL character"),
        ("/memory/all", "tags=%ED%A0%80", "tags", "not valid UTF-8 at byte 1"),
        ("/memory/all", "sector=%FF", "sector", "not valid UTF-8 at byte 1"),
        ("/documents", "status=%00", "status", "NUL character"),
        ("/memory/{id}", "user_id=%ED%A0%80", "user_id", "not valid UTF-8"),
    ],
)
def test_a_query_parameter_with_unstorable_text_is_a_422_naming_it(http, tenant, path, query, field, says):
    # Starlette read bytes that are not UTF-8 with replacement characters: a filter or a name silently altered
    path = path.replace("{id}", str(uuid.uuid4()))
    response = http.get(f"{path}?user_id={tenant}&{query}" if "user_id" not in query else f"{path}?{query}")
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert f"query parameter `{field}`" in error["message"] and says in error["message"], error
    assert error["details"]["field"] == field


@pytest.mark.parametrize(
    ("fields", "field", "bad"),
    [
        ({"metadata": json.dumps({"note": SURROGATE})}, "metadata.note", SURROGATE),
        ({"tags": f"ok,t{NUL}"}, "tags", NUL),
        ({"metadata": json.dumps({"note": "ok"}), "chunk_size": f"1{NUL}"}, "chunk_size", NUL),
    ],
)
def test_a_form_field_with_unstorable_text_is_a_422_naming_it(http, maintenance, tenant, fields, field, bad):
    response = http.post(
        "/memory/ingest/file",
        data={"user_id": tenant, **fields},
        files={"file": ("notes.txt", b"a note about the harbour", "text/plain")},
    )
    _refused(response, field, bad)
    assert _stored(maintenance, tenant) == {"memories": 0, "documents": 0, "jobs": 0}


@pytest.mark.parametrize("bad", list(BAD.values()), ids=list(BAD))
@pytest.mark.parametrize(
    ("memory", "field"),
    [
        (lambda b: {"content": f"a note{b}"}, "content"),
        (lambda b: {"content": "a note", "metadata": {"note": b}}, "metadata.note"),
        (lambda b: {"content": "a note", "tags": ["ok", b]}, "tags.1"),
        (lambda b: {"content": "a note", "summary": b}, "summary"),
    ],
)
def test_an_import_line_with_unstorable_text_is_a_422_naming_its_line_and_field(
    http, maintenance, tenant, memory, field, bad
):
    body = _export(tenant, memory(bad))
    for raw in (False, True):  # the escape, and the bytes a lax encoder writes for a surrogate
        sent = body if not raw else body.replace(b"\\ud800", SURROGATE.encode("utf-8", "surrogatepass"))
        response = http.post(
            "/import", params={"user_id": tenant}, content=sent, headers={"content-type": "application/x-ndjson"}
        )
        _refused(response, field, bad)
        assert response.json()["error"]["message"].startswith("line 2: field "), response.text
        assert response.json()["error"]["details"]["line"] == 2
    assert _stored(maintenance, tenant) == {"memories": 0, "documents": 0, "jobs": 0}


_KEYS = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=6)
_PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers(-9, 9) | st.text(st.characters(codec="utf-8", exclude_characters="\x00"),
                                                              max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=8,
)  # fmt: skip


@st.composite
def _metadata_with_one_bad_string(draw) -> tuple[dict[str, Any], str, str]:
    """Metadata of any shape with a bad character put into one string somewhere in it: (metadata, its path, bad)."""
    metadata = draw(st.dictionaries(_KEYS, _PLAIN, min_size=1, max_size=3))
    bad = draw(st.sampled_from([SURROGATE, "\udfff", NUL]))
    path: list[str | int] = []
    node: Any = metadata
    while True:
        if isinstance(node, dict) and node:
            key = draw(st.sampled_from(sorted(node)))
        elif isinstance(node, list) and node:
            key = draw(st.integers(0, len(node) - 1))
        else:
            break
        if not isinstance(node[key], dict | list) or not node[key] or draw(st.booleans()):
            node[key] = f"{node[key] if isinstance(node[key], str) else ''}{bad}"
            path.append(key)
            return metadata, ".".join(str(p) for p in ["metadata", *path]), bad
        path.append(key)
        node = node[key]
    raise AssertionError("unreachable: the metadata has at least one key")


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_metadata_with_one_bad_string())
def test_generated_metadata_with_one_bad_string_is_refused_naming_its_path(http, tenant, case):
    metadata, field, bad = case
    response = _json(http, "post", "/memory/add", {"content": "a note", "metadata": metadata, "user_id": tenant})
    assert response.status_code == 422, response.text
    details = response.json()["error"]["details"]
    assert details["field"] == field
    assert details["code_point"] == f"U+{ord(bad):04X}"
