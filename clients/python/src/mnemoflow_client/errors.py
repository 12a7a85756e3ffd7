"""The exceptions a call raises: one base class carrying the gateway's error code, message, details, HTTP status and
request id, and a subclass per kind of answer a caller handles differently."""

from __future__ import annotations

import json
from typing import Any


class MnemoflowError(Exception):
    """An error the gateway answered (or met on the way to it).

    `code` and `message` are the server's (`{"error": {"code", "message", "details"}}`), `status` the HTTP status
    (None when no answer came), `request_id` the `X-Request-ID` the gateway logged it under, `retry_after` the
    seconds its `Retry-After` asked for, if any."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "error",
        status: int | None = None,
        details: Any = None,
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.details = details
        self.request_id = request_id
        self.retry_after = retry_after

    def __str__(self) -> str:
        where = f"{self.status} {self.code}" if self.status is not None else self.code
        request = f", request {self.request_id}" if self.request_id else ""
        return f"{self.message} ({where}{request})"


class InvalidInput(MnemoflowError):
    """400/422: the request is wrong; `message` says what to change, `details` lists each field's problem."""


class Unauthorized(MnemoflowError):
    """401: no API key, or one the gateway does not know (MNEMOFLOW_API_KEY)."""


class Forbidden(MnemoflowError):
    """403: the key may not do this: another tenant's `user_id`, or an operator route without the operator key."""


class NotFound(MnemoflowError):
    """404: no such memory, document, job or run for this tenant (or no such route)."""


class Conflict(MnemoflowError):
    """409: an idempotency key already used for another request."""


class PayloadTooLarge(MnemoflowError):
    """413: a body or document over the gateway's limit; split it or send less."""


class UnsupportedMedia(MnemoflowError):
    """415: a document of a format ingestion does not handle, or not the format it was declared as."""


class RateLimited(MnemoflowError):
    """429: the tenant's quota is used up for now; `retry_after` says in how many seconds it fits again."""


class UpstreamFailed(MnemoflowError):
    """502: a URL the gateway was asked to fetch could not be fetched."""


class ServerError(MnemoflowError):
    """500 (or another 5xx): the gateway failed; `request_id` finds it in the gateway's log."""


class Unavailable(MnemoflowError):
    """503: the database, the broker or the embedding provider cannot serve now; the same request may pass later."""


class TransportError(MnemoflowError):
    """No answer: the gateway could not be reached, or did not answer in time (MNEMOFLOW_URL, `timeout`)."""


class JobFailed(MnemoflowError):
    """`wait(..., check=True)`: the job (or decay run) ended `failed` (or `skipped`); `job` is its last state."""

    def __init__(self, message: str, job: Any) -> None:
        super().__init__(message, code="job_failed")
        self.job = job


class WaitTimeout(MnemoflowError):
    """`wait`'s timeout passed before the job ended; `job` is the last state seen (it may still finish)."""

    def __init__(self, message: str, job: Any) -> None:
        super().__init__(message, code="wait_timeout")
        self.job = job


_BY_STATUS: dict[int, type[MnemoflowError]] = {
    400: InvalidInput,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    415: UnsupportedMedia,
    422: InvalidInput,
    429: RateLimited,
    502: UpstreamFailed,
    503: Unavailable,
}


def error_from_answer(status: int, body: bytes, headers: Any, retry_after: float | None = None) -> MnemoflowError:
    """The exception for an error answer: its class from the status, its fields from the `{"error": ...}` body (or
    the body's first 500 characters when it is not the gateway's JSON: a proxy's page, say)."""
    code, message, details = f"http_{status}", "", None
    try:
        error = json.loads(body)["error"]
        code, message, details = str(error.get("code", code)), str(error.get("message", "")), error.get("details")
    except (ValueError, KeyError, TypeError, AttributeError):
        message = body[:500].decode("utf-8", "replace").strip()
    kind = _BY_STATUS.get(status) or (ServerError if status >= 500 else MnemoflowError)
    return kind(
        message or f"HTTP {status}",
        code=code,
        status=status,
        details=details,
        request_id=headers.get("x-request-id"),
        retry_after=retry_after,
    )
