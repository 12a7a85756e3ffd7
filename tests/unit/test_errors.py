"""How an error is worded for a tenant: the addresses of the services behind it masked."""

from __future__ import annotations

import pytest

from shared.errors import public_message


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "openai embeddings at http://10.0.0.5:8000/v1/embeddings answered 500",
            "RuntimeError: openai embeddings at <address> answered 500",
        ),
        ("see https://vllm.internal/docs?x=1 for details", "RuntimeError: see <address> for details"),
        (
            "Error 111 connecting to redis:6379. Connection refused.",
            "RuntimeError: Error 111 connecting to <address>. Connection refused.",
        ),
        (
            'connection to server at "192.168.1.20", port 5432 failed',
            'RuntimeError: connection to server at "<address>", port 5432 failed',
        ),
        ("ollama:11434 timed out", "RuntimeError: <address> timed out"),
        (
            "the model answered 400: dimensions must be 384",
            "RuntimeError: the model answered 400: dimensions must be 384",
        ),
    ],
)
def test_urls_and_network_addresses_are_masked_and_the_rest_kept(message, expected):
    assert public_message(RuntimeError(message)) == expected
