"""A Redis cache in front of a provider, for query embeddings (key: provider, model, tenant, hash of the text).

Each tenant has entries of its own: a shared entry would answer one tenant's query faster because another asked
it (its `embed` stage timing, or its latency, would say so), telling it what another tenant asked."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence

import numpy as np
import redis

from shared.embedding.base import EmbeddingProvider
from shared.embedding.calls import EmbedCall, embed_timed

log = logging.getLogger("mnemoflow.embedding")


class CachedEmbedder:
    """Same interface as the provider it wraps; a Redis outage only costs the cache, never the call."""

    def __init__(
        self, inner: EmbeddingProvider, client: redis.Redis, *, ttl_seconds: int, prefix: str = "mnemoflow:qemb"
    ) -> None:
        self.inner = inner
        self.client = client
        self.ttl_seconds = ttl_seconds
        self.prefix = f"{prefix}:{inner.name}:{inner.model}:{inner.dim}:"
        self.name, self.model, self.dim = inner.name, inner.model, inner.dim

    def key(self, text: str, tenant: str = "") -> str:
        # the tenant in braces (a user id has none): its entries are its own, and erased with it
        return f"{self.prefix}{{{tenant}}}:{hashlib.sha256(text.encode('utf-8')).hexdigest()}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_logged(texts)[0]

    def embed_logged(self, texts: Sequence[str], tenant: str = "") -> tuple[np.ndarray, EmbedCall | None]:
        """The vectors (from `tenant`'s entries where it has them), and the record of the model call for the
        texts not in the cache (None if all were)."""
        keys = [self.key(t, tenant) for t in texts]
        try:
            cached = self.client.mget(keys)
        except redis.RedisError as exc:
            log.warning("query-embedding cache unavailable (%s); embedding without it", exc)
            return embed_timed(self.inner, texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        missing = []
        for i, raw in enumerate(cached):
            if isinstance(raw, bytes) and len(raw) == 4 * self.dim:
                out[i] = np.frombuffer(raw, dtype=np.float32)
            else:
                missing.append(i)
        call = None
        if missing:
            fresh, call = embed_timed(self.inner, [texts[i] for i in missing])
            out[missing] = fresh
            try:
                with self.client.pipeline(transaction=False) as pipe:
                    for i, vector in zip(missing, fresh, strict=True):
                        pipe.set(keys[i], np.asarray(vector, dtype=np.float32).tobytes(), ex=self.ttl_seconds)
                    pipe.execute()
            except redis.RedisError as exc:
                log.warning("could not store query embeddings in the cache: %s", exc)
        return out, call


def tenant_key_pattern(tenant: str, prefix: str = "mnemoflow:qemb") -> str:
    """A SCAN pattern matching the tenant's entries of every provider and model."""
    return f"{prefix}:*:{{{tenant}}}:*"
