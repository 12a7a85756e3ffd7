"""The provider a re-embed would move the store to is tried once before the job starts: a model that answers with
vectors of another size than the request's `dimensions` is the request's mistake (422 naming the size it answers),
not a provider that is down (it was a 503 saying "did not answer"; found by tests/security/test_schemathesis.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from services.gateway.routers import maintenance
from shared.api.jobs import ReembedRequest
from shared.embedding.http import DimensionMismatch, EmbeddingServiceError
from shared.errors import InvalidInput, ServiceUnavailable


class Provider:
    """An HTTP provider's stand-in whose one call fails with `error` (or answers when None)."""

    name, model = "openai", "text-embedding-3-small"

    def __init__(self, dim: int, error: Exception | None) -> None:
        self.dim, self.error = dim, error

    def embed(self, texts):
        if self.error is not None:
            raise self.error
        return np.ones((len(texts), self.dim), dtype=np.float32)


def _target(monkeypatch, error: Exception | None, dimensions: int = 64):
    monkeypatch.setattr(maintenance, "embedder_for", lambda settings, provider, dim: Provider(dim, error))
    state = SimpleNamespace(engine=SimpleNamespace(embedders={}), settings=None)
    return maintenance._target_embedder(state, ReembedRequest(provider="openai", dimensions=dimensions))


def test_a_model_answering_another_dimension_is_a_422_naming_the_one_it_answers(monkeypatch):
    mismatch = DimensionMismatch("returned 32-dimensional vectors", answered=32, expected=64)
    with pytest.raises(InvalidInput) as refused:
        _target(monkeypatch, mismatch)
    assert refused.value.status_code == 422
    assert "answers 32-dimensional vectors, not 64; ask for dimensions=32" in refused.value.message
    assert refused.value.details == {"dimensions": 64, "answered": 32}


def test_a_provider_that_fails_is_still_a_503(monkeypatch):
    with pytest.raises(ServiceUnavailable, match="did not answer"):
        _target(monkeypatch, EmbeddingServiceError("openai embeddings could not be reached", retryable=True))


def test_a_provider_that_answers_in_the_asked_dimension_is_the_target(monkeypatch):
    assert _target(monkeypatch, None, dimensions=32).dim == 32
