"""Error answers become exceptions carrying the gateway's code, message, details, status and request id."""

from __future__ import annotations

import pytest
from mnemoflow_client import (
    Conflict,
    Forbidden,
    InvalidInput,
    Mnemoflow,
    MnemoflowError,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    ServerError,
    Unauthorized,
    Unavailable,
    UnsupportedMedia,
    UpstreamFailed,
)
from mnemoflow_client.errors import error_from_answer

from tests.unit.client.conftest import Answer, FakeGateway


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, InvalidInput),
        (401, Unauthorized),
        (403, Forbidden),
        (404, NotFound),
        (409, Conflict),
        (413, PayloadTooLarge),
        (415, UnsupportedMedia),
        (422, InvalidInput),
        (429, RateLimited),
        (500, ServerError),
        (502, UpstreamFailed),
        (503, Unavailable),
        (504, ServerError),
        (418, MnemoflowError),
    ],
)
def test_each_status_has_its_exception(status: int, kind: type[MnemoflowError]):
    body = b'{"error": {"code": "some_code", "message": "what went wrong"}}'
    error = error_from_answer(status, body, {"x-request-id": "abc"})
    assert type(error) is kind
    assert (error.status, error.code, error.request_id) == (status, "some_code", "abc")
    assert error.message == "what went wrong"


def test_an_answer_that_is_not_the_gateways_json_keeps_its_text():
    error = error_from_answer(502, b"<html>Bad Gateway</html>" + b"x" * 1000, {})
    assert isinstance(error, UpstreamFailed)
    assert error.code == "http_502" and error.message.startswith("<html>Bad Gateway") and len(error.message) == 500


def test_a_validation_error_carries_the_fields_problems(fake_gateway: FakeGateway):
    details = [{"loc": ["body", "k"], "msg": "Input should be greater than or equal to 1", "type": "greater_than"}]
    fake_gateway.script = [
        Answer(422, {"error": {"code": "invalid_input", "message": "k: Input should be >= 1", "details": details}})
    ]
    with Mnemoflow(fake_gateway.url) as client, pytest.raises(InvalidInput) as raised:
        client.query("tea", k=0)
    error = raised.value
    assert error.details == details and error.request_id == "req-test-1"
    assert str(error) == "k: Input should be >= 1 (422 invalid_input, request req-test-1)"
    assert fake_gateway.seen[0].json() == {"query": "tea", "k": 0}


def test_a_not_found_names_what_was_missing(fake_gateway: FakeGateway):
    message = "memory 3f0c... not found for user_id 'alice'"
    fake_gateway.script = [Answer(404, {"error": {"code": "not_found", "message": message}})]
    with Mnemoflow(fake_gateway.url, user_id="alice") as client, pytest.raises(NotFound) as raised:
        client.delete("3f0c6a44-5ad4-4b4e-9a4e-0d1f3c5b8c11")
    assert raised.value.message == message
    assert fake_gateway.seen[0].query == {"user_id": ["alice"]}


def test_health_answers_a_stack_that_is_down_instead_of_raising(fake_gateway: FakeGateway):
    down = {"ok": False, "database": {"ok": False}, "broker": {"ok": True}, "workers": {"ok": True}}
    fake_gateway.script = [Answer(503, down)]
    with Mnemoflow(fake_gateway.url) as client:
        assert client.health() == down
    assert len(fake_gateway.seen) == 1  # not retried: the answer is the news
