"""Bad input across routes, against the real gateway: user ids that cannot be a tenant, bodies over the limit sent
without a Content-Length, an idempotency key reused for another batch."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

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
