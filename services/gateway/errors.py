"""Every error leaves the gateway in one JSON shape: {"error": {"code", "message", "details"}}."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from shared.embedding.calls import EmbeddingFailed
from shared.errors import MnemoflowError
from shared.storage import embed_logs as embed_log_store

log = logging.getLogger("mnemoflow.gateway")


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
        return JSONResponse(error_body(exc.code, exc.message, exc.details), status_code=exc.status_code)

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

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(
            error_body("internal_error", "the server failed to handle this request; it has been logged"),
            status_code=500,
        )
