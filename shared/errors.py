"""One error base class carrying an HTTP status; the gateway renders every subclass the same way."""

from __future__ import annotations

from typing import Any


class MnemoflowError(Exception):
    """An error a caller can act on, with its HTTP status and a stable code."""

    status_code = 500
    code = "internal_error"

    def __init__(self, message: str, *, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


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
