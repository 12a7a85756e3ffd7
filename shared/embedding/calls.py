"""A timed call to a provider: what `embed_logs` records for every model call (model, status, latency, error)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shared.embedding.base import EmbeddingProvider, embed_texts
from shared.embedding.gate import EmbeddingBusy
from shared.errors import public_message

log = logging.getLogger("mnemoflow.embedding")


@dataclass(frozen=True)
class EmbedCall:
    provider: str
    model: str
    item_count: int
    latency_ms: float
    error: str | None = None

    @property
    def status(self) -> str:
        return "failed" if self.error else "completed"


class EmbeddingFailed(RuntimeError):
    """The provider could not embed a batch; carries the call for embed_logs."""

    def __init__(self, call: EmbedCall) -> None:
        super().__init__(f"{call.provider} embedding of {call.item_count} texts failed: {call.error}")
        self.call = call


def embed_timed(
    embedder: EmbeddingProvider, texts: Sequence[str], contexts: Sequence[str] | None = None
) -> tuple[np.ndarray, EmbedCall]:
    """The vectors and a record of the call; a provider error becomes EmbeddingFailed carrying its record.
    `contexts`: what each text follows, for providers that can use it (`embed_texts`)."""
    started = time.perf_counter()
    try:
        vectors = embed_texts(embedder, texts, contexts)
    except EmbeddingBusy:
        raise  # this process had no room for the call: not the provider's failure, and nothing was asked of it
    except Exception as exc:
        elapsed = (time.perf_counter() - started) * 1000
        # The record reaches tenants (a 503, a job's error): the provider's address stays in the log.
        log.warning(
            "%s (%s) failed to embed %d texts: %s: %s",
            embedder.name,
            embedder.model,
            len(texts),
            type(exc).__name__,
            exc,
        )
        call = EmbedCall(embedder.name, embedder.model, len(texts), elapsed, public_message(exc)[:2000])
        raise EmbeddingFailed(call) from exc
    return vectors, EmbedCall(embedder.name, embedder.model, len(texts), (time.perf_counter() - started) * 1000)


def embed_query_timed(
    embedder: EmbeddingProvider, texts: Sequence[str], *, tenant: str
) -> tuple[np.ndarray, EmbedCall | None]:
    """Like embed_timed, through a cache when the embedder has one (the tenant's own entries): None when no
    model call was needed."""
    logged = getattr(embedder, "embed_logged", None)
    if logged is not None:
        result: tuple[np.ndarray, EmbedCall | None] = logged(texts, tenant=tenant)
        return result
    return embed_timed(embedder, texts)
