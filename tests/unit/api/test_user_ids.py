"""The one user id type of every request: what a tenant may be called, and what a refusal says."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError

from shared.api.common import USER_ID_PATTERN, UserId, check_user_id
from shared.api.ingest import IngestRequest, form_params
from shared.api.memories import BatchRequest, MemoryAdd
from shared.api.query import QueryRequest

USER_ID = TypeAdapter(UserId)


@pytest.mark.parametrize(
    "value",
    [
        "a",
        "Z",
        "0",
        "alice",
        "t-1a2b3c4d5e6f",
        "alice@example.com",
        "org:team.member",
        "locomo-conv-26:d30",
        "a_b",
        "-leading-hyphen",
        ".leading-dot",
        "a" * 256,
        "x" + "_" * 255,
    ],
)
def test_plain_names_up_to_256_characters_are_user_ids(value):
    assert USER_ID.validate_python(value) == value


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("", "''"),
        ("a" * 257, "257 characters"),
        ("b" * 10_000, "10,000 characters"),
        ("_system", "'_system'"),  # a leading underscore is the store's own (store-wide jobs)
        ("_other", "'_other'"),  # the /metrics label of every tenant past the cap
        ("_", "'_'"),
        ("alice bob", "'alice bob'"),
        (" alice", "' alice'"),
        ("alice ", "'alice '"),
        ("alice\n", "'alice\\n'"),
        ("alice\t", "'alice\\t'"),
        ("al\x00ice", "'al\\x00ice'"),
        ("ålice", "'ålice'"),
        ("алиса", "'алиса'"),
        ("用户", "'用户'"),
        ("١٢٣", "'١٢٣'"),  # Arabic-Indic digits are digits to str.isdigit, not here
        ("\u212a", "'\u212a'"),  # the Kelvin sign, which case-insensitive matching would take for a K
        ("alice~copy", "'alice~copy'"),
        ("a/b", "'a/b'"),
        ("a*", "'a*'"),
        ("tenant{x}", "'tenant{x}'"),
        ('a"b', "'a\"b'"),
    ],
)
def test_anything_else_is_refused_with_what_is_allowed(value, shown):
    with pytest.raises(ValidationError) as refused:
        USER_ID.validate_python(value)
    message = str(refused.value)
    assert "1-256 characters of letters (A-Z, a-z), digits and - _ . @ :, not starting with _ (reserved)" in message
    assert f"got {shown}" in message


@pytest.mark.parametrize("value", [42, 4.2, True, ["alice"], {"id": "alice"}])
def test_a_user_id_is_a_string(value):
    with pytest.raises(ValidationError):
        USER_ID.validate_python(value)


def test_the_json_schema_carries_the_rule_for_clients():
    schema = USER_ID.json_schema()
    assert schema == {"type": "string", "pattern": USER_ID_PATTERN, "minLength": 1, "maxLength": 256}


def test_the_pattern_is_the_check():
    import re

    pattern = re.compile(USER_ID_PATTERN)
    for value in ["alice", "a" * 256, "a" * 257, "_x", "x_", "a b", "ålice", "", "-"]:
        try:
            check_user_id(value)
            accepted = True
        except ValueError:
            accepted = False
        assert accepted == bool(pattern.fullmatch(value)), value


@pytest.mark.parametrize(
    ("model", "body"),
    [
        (MemoryAdd, {"content": "x", "user_id": "a b"}),
        (BatchRequest, {"items": [{"content": "x"}], "user_id": "a b"}),
        (BatchRequest, {"items": [{"content": "x", "user_id": "a b"}]}),
        (QueryRequest, {"query": "x", "user_id": "a b"}),
        (QueryRequest, {"query": "x", "filters": {"user_id": "a b"}}),
        (IngestRequest, {"content_type": "txt", "data": "x", "user_id": "a b"}),
    ],
)
def test_every_request_body_uses_the_type(model: type[BaseModel], body):
    with pytest.raises(ValidationError, match="not starting with _"):
        model.model_validate(body)
    model.model_validate(_with_user(body, "alice"))


def test_an_upload_form_checks_its_user_id():
    assert form_params({"user_id": "alice"}).user_id == "alice"
    assert form_params({}).user_id is None
    with pytest.raises(ValidationError, match="not starting with _"):
        form_params({"user_id": "_system"})


def _with_user(body: dict, user: str) -> dict:
    out = {k: (_with_user(v, user) if isinstance(v, dict) else v) for k, v in body.items()}
    if "items" in out:
        out["items"] = [_with_user(item, user) for item in out["items"]]
    return {k: (user if k == "user_id" else v) for k, v in out.items()}
