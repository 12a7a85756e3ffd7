"""A Redis cache in front of a provider, for query embeddings (key: provider, model, tenant, hash of the text).

Each tenant has entries of its own: a shared entry would answer one tenant's query faster because another asked
it (its `embed` stage timing, or its latency, would say so), telling it what another tenant asked.

The gateway writes new entries behind (`write_behind`): its aftermath thread stores those of every query of the
last interval in one pipeline, off the queries' path. An entry reaches Redis up to one interval later than written
through; an erasure's sweep of the tenant's keys meets the same race with a query then in flight either way, and
every entry expires with its TTL.

Each entry is sealed under its key (shared/security/sealing.py): a vector written by anything without the key
would steer a tenant's query to what its writer chose; it reads as a miss, and is counted."""

from __future__ import annotations

import hashlib
import itertools
import logging
import threading
from collections.abc import Callable, Sequence

import numpy as np
import redis

from shared.embedding.base import EmbeddingProvider
from shared.embedding.calls import EmbedCall, embed_timed
from shared.security.sealing import Sealer

log = logging.getLogger("mnemoflow.embedding")


class CachedEmbedder:
    """Same interface as the provider it wraps; a Redis outage only costs the cache, never the call."""

    def __init__(
        self,
        inner: EmbeddingProvider,
        client: redis.Redis,
        *,
        ttl_seconds: int,
        sealer: Sealer,
        prefix: str = "mnemoflow:qemb",
        write_behind: bool = False,
        max_pending: int = 10_000,
        on_bad_seal: Callable[[int], None] | None = None,
    ) -> None:
        self.inner = inner
        self.sealer = sealer
        self.on_bad_seal = on_bad_seal  # called with how many entries of a lookup failed their seal
        self.client = client
        self.ttl_seconds = ttl_seconds
        self.prefix = f"{prefix}:{inner.name}:{inner.model}:{inner.dim}:"
        self.name, self.model, self.dim = inner.name, inner.model, inner.dim
        # write_behind: new entries wait in memory for `flush()` (the gateway's aftermath thread calls it), so a
        # query that misses costs one round trip (the lookup), not two; they are found here meanwhile.
        self.write_behind = write_behind
        self.max_pending = max_pending
        self._pending: dict[str, bytes] = {}
        self._lock = threading.Lock()

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
        broken = 0
        for i, entry in enumerate(cached):
            raw = self.sealer.open(keys[i], entry) if isinstance(entry, bytes) else None
            if entry is not None and (raw is None or len(raw) != 4 * self.dim):
                broken += 1
                raw = None
            if raw is None:
                raw = self._pending.get(keys[i])  # written behind, not yet flushed
            if raw is not None:
                out[i] = np.frombuffer(raw, dtype=np.float32)
            else:
                missing.append(i)
        if broken:
            log.warning("query-embedding cache: %d entries failed their seal; embedding those again", broken)
            if self.on_bad_seal is not None:
                self.on_bad_seal(broken)
        call = None
        if missing:
            fresh, call = embed_timed(self.inner, [texts[i] for i in missing])
            out[missing] = fresh
            entries = {keys[i]: np.asarray(v, dtype=np.float32).tobytes() for i, v in zip(missing, fresh, strict=True)}
            if self.write_behind:
                with self._lock:
                    room = self.max_pending - len(self._pending)  # a stalled flush costs the cache, not memory
                    self._pending.update(itertools.islice(entries.items(), max(room, 0)))
            else:
                self._store(entries)
        return out, call

    def flush(self) -> int:
        """Write the entries kept for later (`write_behind`) in one round trip; returns how many there were."""
        with self._lock:
            entries, self._pending = self._pending, {}
        if entries:
            self._store(entries)
        return len(entries)

    def _store(self, entries: dict[str, bytes]) -> None:
        try:
            with self.client.pipeline(transaction=False) as pipe:
                for key, raw in entries.items():
                    pipe.set(key, self.sealer.seal(key, raw), ex=self.ttl_seconds)
                pipe.execute()
        except redis.RedisError as exc:
            log.warning("could not store %d query embeddings in the cache: %s", len(entries), exc)


def tenant_key_pattern(tenant: str, prefix: str = "mnemoflow:qemb") -> str:
    """A SCAN pattern matching the tenant's entries of every provider and model."""
    return f"{prefix}:*:{{{tenant}}}:*"
