"""The app-wide dependency that refuses text the store cannot hold (shared.memory.storable) in a request's query string
and in the JSON or form body FastAPI decoded for its route, with a 422 naming the field, before the route runs.

Bodies a route reads by hand (POST /import's lines, POST /memory/ingest/file's form) are checked where they are
read. A lone surrogate used to reach psycopg, whose encoding error was a 500 that closed the connection.
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

from fastapi import Request
from fastapi.routing import APIRoute

from shared.errors import InvalidInput
from shared.memory.storable import check_pairs, check_storable, may_hold_unstorable, printable

_FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


def query_pairs(raw: bytes) -> list[tuple[str, str]]:
    """The query string's name=value pairs decoded as strict UTF-8; InvalidInput naming a parameter that is not
    UTF-8 (Starlette would have read it with replacement characters: the value stored altered)."""
    pairs = []
    for piece in raw.split(b"&"):
        if not piece:
            continue
        name, _, value = piece.partition(b"=")
        try:
            name_text = unquote_to_bytes(name.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError as exc:
            shown = printable(unquote_to_bytes(name.replace(b"+", b" ")).decode("utf-8", "replace"))
            raise InvalidInput(
                f"a query parameter's name ({shown!r}) is not valid UTF-8 at byte {exc.start + 1}; "
                "percent-encode UTF-8 text",
                details={"field": shown, "byte": exc.start + 1},
            ) from exc
        try:
            value_text = unquote_to_bytes(value.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(
                f"query parameter `{printable(name_text)}` is not valid UTF-8 at byte {exc.start + 1}; "
                "percent-encode UTF-8 text",
                details={"field": printable(name_text), "byte": exc.start + 1},
            ) from exc
        pairs.append((name_text, value_text))
    return pairs


async def refuse_unstorable_text(request: Request) -> None:
    """Every route's first dependency: 422 for a lone surrogate, a NUL or bytes that are not UTF-8 in the query
    string, or a lone surrogate or a NUL anywhere in the body the route declares (values and keys)."""
    raw_query = request.scope.get("query_string", b"")
    if raw_query:
        check_pairs(query_pairs(raw_query), where="query parameter")
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or route.body_field is None:
        return  # no body, or one the route reads itself (and checks there)
    content_type = request.headers.get("content-type", "")
    if content_type.startswith(_FORMS):
        # FastAPI parsed it for the route already (Request caches it): this reads no byte again
        form = await request.form()
        check_pairs(((name, value) for name, value in form.multi_items() if isinstance(value, str)), where="form field")
        return
    if content_type and not _is_json(content_type):
        return  # bytes FastAPI did not read as JSON: its validation answers them
    raw = await request.body()  # read already, for FastAPI's parse
    if not raw or not may_hold_unstorable(raw):
        return  # the common case: a scan of the bytes, no walk over the decoded body
    try:
        body = await request.json()  # cached by FastAPI's own parse: no second decoding
    except ValueError:
        return  # not JSON: FastAPI answered it already
    check_storable(body)


def _is_json(content_type: str) -> bool:
    """As FastAPI reads a body as JSON: application/json or application/*+json."""
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))
