"""HTTP providers: any OpenAI-compatible `/v1/embeddings` (OpenAI, vLLM, TEI, Ollama's /v1) and Ollama's `/api/embed`.

Batched, retried with exponential backoff on connection errors, 429 and 5xx (tenacity); other 4xx are
the caller's to fix and fail at once with the server's message. API keys are never logged, and the server's
address stays out of the errors raised (a tenant may read them: a 503, a job's error); the log has it.
Texts longer than a window (architecture seed: 512 tokens, 50 overlap; tokens estimated, since the
server's tokenizer is not here) are split into overlapping windows whose vectors are mean-pooled.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

import httpx
import numpy as np
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

from shared.embedding.base import normalize_rows
from shared.text import split_by_estimate

log = logging.getLogger("mnemoflow.embedding")


class EmbeddingServiceError(RuntimeError):
    """The embedding service refused or failed the request."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class DimensionMismatch(EmbeddingServiceError):
    """The model answered vectors of another dimension than the one asked for."""

    def __init__(self, message: str, *, answered: int, expected: int) -> None:
        super().__init__(message, retryable=False)
        self.answered, self.expected = answered, expected


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, EmbeddingServiceError) and exc.retryable


class HttpEmbedder:
    """`api="openai"`: POST {base_url}/v1/embeddings; `api="ollama"`: POST {base_url}/api/embed."""

    def __init__(
        self,
        *,
        api: Literal["openai", "ollama"],
        base_url: str,
        model: str,
        dim: int,
        api_key: str | None = None,
        batch_size: int = 128,
        timeout_seconds: float = 30.0,
        max_attempts: int = 5,
        backoff_seconds: float = 0.5,
        window_tokens: int = 512,
        overlap_tokens: int = 50,
    ) -> None:
        self.name: str = api
        self.model = model
        self.dim = dim
        self.api = api
        self.batch_size = batch_size
        self.window_tokens, self.overlap_tokens = window_tokens, overlap_tokens
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_seconds)
        self._post = retry(
            retry=retry_if_exception(_retryable),
            stop=stop_after_attempt(max_attempts),
            wait=wait_exponential(multiplier=backoff_seconds, max=30),
            reraise=True,
        )(self._post_once)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        owners: list[int] = []
        pieces: list[str] = []
        for row, text in enumerate(texts):
            windows = split_by_estimate(text, self.window_tokens, self.overlap_tokens)
            owners.extend([row] * len(windows))
            pieces.extend(windows)
        rows: list[list[float]] = []
        for start in range(0, len(pieces), self.batch_size):
            rows.extend(self._post(pieces[start : start + self.batch_size]))
        if not rows:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = normalize_rows(np.asarray(rows, dtype=np.float32).reshape(len(pieces), -1))
        matrix = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
        np.add.at(matrix, owners, vectors)  # a long text is the mean of its windows
        if matrix.shape[1] != self.dim:
            raise DimensionMismatch(
                f"{self.name} model {self.model!r} returned {matrix.shape[1]}-dimensional vectors but the store "
                f"expects {self.dim}; set MNEMOFLOW_VECTOR_DIM={matrix.shape[1]} for a new store",
                answered=matrix.shape[1],
                expected=self.dim,
            )
        return normalize_rows(matrix)

    def _post_once(self, batch: list[str]) -> list[list[float]]:
        if self.api == "openai":
            path, payload = "/v1/embeddings", {"model": self.model, "input": batch}
        else:
            path, payload = "/api/embed", {"model": self.model, "input": batch}
        try:
            response = self._client.post(path, json=payload)
        except httpx.TransportError as exc:
            log.warning(
                "%s embeddings at %s%s: %s: %s", self.name, self._client.base_url, path, type(exc).__name__, exc
            )
            raise EmbeddingServiceError(
                f"{self.name} embeddings could not be reached ({type(exc).__name__})", retryable=True
            ) from exc
        if response.status_code >= 400:
            retryable = response.status_code == 429 or response.status_code >= 500
            detail = _error_text(response)
            log.warning(
                "%s embeddings at %s%s answered %s: %s",
                self.name,
                self._client.base_url,
                path,
                response.status_code,
                detail,
            )
            raise EmbeddingServiceError(
                f"{self.name} embeddings answered {response.status_code}: {detail}", retryable=retryable
            )
        body: Any = response.json()
        if self.api == "openai":
            data = sorted(body["data"], key=lambda item: item["index"])
            vectors = [item["embedding"] for item in data]
        else:
            vectors = body["embeddings"]
        if len(vectors) != len(batch):
            raise EmbeddingServiceError(
                f"{self.name} returned {len(vectors)} vectors for {len(batch)} texts", retryable=True
            )
        return vectors

    def close(self) -> None:
        self._client.close()


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("message", error))[:300]
    return str(error or body)[:300]
