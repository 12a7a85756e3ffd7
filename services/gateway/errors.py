"""Every error leaves the gateway in one JSON shape: {"error": {"code", "message", "details"}}.

A database or Redis that cannot serve now (down, restarting, out of connections, a statement or lock wait past
its timeout, the pool exhausted) is a 503 with Retry-After: the request may succeed later as it is. Anything
else unexpected is a 500, logged with the request's id (which the response carries too).
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa_exc
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from shared.embedding.calls import EmbeddingFailed
from shared.errors import MnemoflowError
from shared.storage import embed_logs as embed_log_store

log = logging.getLogger("mnemoflow.gateway")

OVERLOADED_RETRY_SECONDS = 1  # busy: the same request is likely to pass in a moment
DOWN_RETRY_SECONDS = 5  # down or restarting: give it time to come back
# PostgreSQL error classes (SQLSTATE's first two characters, or the whole code) that mean "not now" rather
# than "this request is wrong", with what a client is told.
_TRANSIENT_STATES = {
    "57014": ("the database cancelled a statement that ran past its time limit (overloaded)", OVERLOADED_RETRY_SECONDS),
    "55P03": ("a database lock was not granted within its time limit (busy)", OVERLOADED_RETRY_SECONDS),
    "40": ("the transaction conflicted with another one and was rolled back", OVERLOADED_RETRY_SECONDS),
    "53": ("the database is out of resources (connections, memory or disk)", DOWN_RETRY_SECONDS),
    "57": ("the database is shutting down or starting up", DOWN_RETRY_SECONDS),
    "08": ("the connection to the database failed", DOWN_RETRY_SECONDS),
}


def unavailable(error: BaseException) -> tuple[str, int] | None:
    """Why the database or Redis cannot serve now and in how many seconds to retry, when `error` says so;
    None for an error that retrying would not fix."""
    if isinstance(error, sa_exc.TimeoutError):  # QueuePool: no connection free within the pool timeout
        return "every database connection of this gateway is busy (overloaded)", OVERLOADED_RETRY_SECONDS
    if isinstance(error, redis.ConnectionError | redis.TimeoutError):
        return "Redis is unreachable", DOWN_RETRY_SECONDS
    if isinstance(error, sa_exc.DBAPIError):
        if error.connection_invalidated:
            return "the connection to the database was lost", DOWN_RETRY_SECONDS
        if error.orig is not None:
            error = error.orig
    if isinstance(error, psycopg.InterfaceError) or (
        isinstance(error, psycopg.OperationalError) and error.sqlstate is None
    ):  # refused, reset or closed: psycopg gives no SQLSTATE for a connection it could not make or keep
        return "the database is unreachable", DOWN_RETRY_SECONDS
    if isinstance(error, psycopg.Error) and error.sqlstate:
        return _TRANSIENT_STATES.get(error.sqlstate) or _TRANSIENT_STATES.get(error.sqlstate[:2])
    return None


def request_id(request: Request) -> str:
    """The id the RequestId middleware gave the request ('-' outside it)."""
    return getattr(request.state, "request_id", "-")


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        body["details"] = details
    return {"error": body}


def _describe(error: dict[str, Any]) -> str:
    location = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
    if error.get("type") == "json_invalid":
        return f"the request body is not valid JSON ({error.get('ctx', {}).get('error', 'parse error')})"
    return f"{location}: {error.get('msg', 'invalid value')}"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(MnemoflowError)
    async def _domain(_: Request, exc: MnemoflowError) -> JSONResponse:
        headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else None
        return JSONResponse(
            error_body(exc.code, exc.message, exc.details), status_code=exc.status_code, headers=headers
        )

    @app.exception_handler(EmbeddingFailed)
    async def _embedding(request: Request, exc: EmbeddingFailed) -> JSONResponse:
        # The request's transaction rolled back; the failed call is recorded in a session of its own.
        state = request.app.state.mnemoflow

        route = getattr(request.scope.get("route"), "path", "")
        purpose = {"/memory/add": "add", "/memory/query": "query", "/memory/{memory_id}": "update"}.get(route, route)

        def record() -> None:
            with state.db.session() as session:
                embed_log_store.log_embedding(session, exc.call, purpose=purpose)

        try:
            await run_in_threadpool(record)
        except Exception:
            log.exception("could not record a failed embedding call")
        log.warning("embedding provider failed on %s: %s", request.url.path, exc.call.error)
        return JSONResponse(
            error_body(
                "embedding_unavailable",
                f"the embedding provider ({exc.call.provider}, model {exc.call.model}) failed: {exc.call.error}. "
                "Nothing was written; retry later or check the provider (GET /health).",
            ),
            status_code=503,
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        messages = [_describe(e) for e in errors]
        details = [{"loc": list(e.get("loc", ())), "msg": e.get("msg"), "type": e.get("type")} for e in errors]
        return JSONResponse(error_body("invalid_input", "; ".join(messages[:5]), details), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}.get(
            exc.status_code, "http_error"
        )
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code)

    async def _infrastructure(request: Request, exc: Exception) -> JSONResponse:
        return _unavailable_or_unexpected(request, exc)

    for kind in (sa_exc.SQLAlchemyError, psycopg.Error, redis.RedisError):
        app.add_exception_handler(kind, _infrastructure)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        return _unavailable_or_unexpected(request, exc)


def _unavailable_or_unexpected(request: Request, exc: Exception) -> JSONResponse:
    rid = request_id(request)
    transient = unavailable(exc)
    if transient is not None:
        reason, retry_after = transient
        log.warning("503 on %s %s (request %s): %s: %s", request.method, request.url.path, rid, reason, exc)
        return JSONResponse(
            error_body("service_unavailable", f"{reason}; retry in {retry_after} s"),
            status_code=503,
            headers={"Retry-After": str(retry_after), "X-Request-ID": rid},
        )
    log.error("unhandled error on %s %s (request %s)", request.method, request.url.path, rid, exc_info=exc)
    return JSONResponse(
        error_body("internal_error", f"the server failed to handle this request; it has been logged as request {rid}"),
        status_code=500,
        headers={"X-Request-ID": rid},
    )
