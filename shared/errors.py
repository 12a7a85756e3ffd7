"""One error base class carrying an HTTP status; the gateway renders every subclass the same way. And how any
other error is worded for a tenant: without the addresses of the services behind it."""

from __future__ import annotations

import re
from typing import Any


class MnemoflowError(Exception):
    """An error a caller can act on, with its HTTP status and a stable code."""

    status_code = 500
    code = "internal_error"

    def __init__(self, message: str, *, details: Any = None, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        self.retry_after = retry_after  # seconds, sent as Retry-After: when trying again makes sense


class InvalidInput(MnemoflowError):
    status_code = 422
    code = "invalid_input"


class NotFound(MnemoflowError):
    status_code = 404
    code = "not_found"


class Unauthorized(MnemoflowError):
    status_code = 401
    code = "unauthorized"


class Forbidden(MnemoflowError):
    status_code = 403
    code = "forbidden"


class PayloadTooLarge(MnemoflowError):
    status_code = 413
    code = "payload_too_large"


class Conflict(MnemoflowError):
    status_code = 409
    code = "conflict"


class RateLimited(MnemoflowError):
    """The tenant used up a quota; `retry_after` says when the request fits again."""

    status_code = 429
    code = "rate_limited"


class ServiceUnavailable(MnemoflowError):
    status_code = 503
    code = "service_unavailable"


class UnsupportedMedia(MnemoflowError):
    """The bytes are of a format ingestion does not handle, or not the format they were declared as."""

    status_code = 415
    code = "unsupported_media"


class ExtractionFailed(InvalidInput):
    """A document of a supported format yielded no text: corrupt, scanned, empty, or over a parser limit."""

    code = "extraction_failed"


class UpstreamFailed(MnemoflowError):
    """A URL the caller asked us to fetch could not be fetched (network error, timeout, error status)."""

    status_code = 502
    code = "upstream_failed"


# Where a provider, database or broker lives: URLs (any scheme), IPv4 addresses, and host:port pairs.
_ADDRESSES = re.compile(
    r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+"
    r"|\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b"
    r"|\b[a-zA-Z][\w-]*(?:\.[\w-]+)*:\d{2,5}\b"
)


def public_message(exc: BaseException) -> str:
    """'Type: message' with URLs and IP addresses masked, for errors a tenant sees (the log keeps the detail)."""
    return _ADDRESSES.sub("<address>", f"{type(exc).__name__}: {exc}")
