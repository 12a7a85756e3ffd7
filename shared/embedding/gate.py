"""How many embeddings one process runs at once, and how many may wait: past that, a call is refused with a 503
and Retry-After instead of queueing threads and memory without end.

The gateway embeds what its requests need (an add, an update, a query) on its request threads. Unbounded, 45
adds of 3 KB of punctuation ran 45 model passes at once on two cores: `/health` timed out at 60 s and the process
grew to 12.8 GB. A worker's pool is its own bound (one task a process), so only the gateway puts a gate in front
of its in-process models; an HTTP provider's server bounds its own work.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Iterator, Sequence

import numpy as np

from shared.embedding.base import ContextualEmbeddingProvider, EmbeddingProvider
from shared.embedding.cost import token_counts, windows
from shared.errors import ServiceUnavailable


class EmbeddingBusy(ServiceUnavailable):
    """Every slot of the process's embedding gate is taken and its queue is full, or the wait ran out."""

    code = "embedding_busy"


class EmbeddingGate:
    """`slots` embeddings at once; more wait, each for `wait_seconds` at most, while what waits costs at most
    `max_waiting` model windows (a short query is 1, a memory of 8,192 tokens 32): many cheap calls queue, a few
    costly ones fill the queue."""

    def __init__(self, slots: int, *, max_waiting: int, wait_seconds: float) -> None:
        if slots < 1 or max_waiting < 0 or wait_seconds <= 0:
            raise ValueError("an embedding gate needs at least one slot, a queue of 0 or more and a positive wait")
        self.slots = slots
        self.max_waiting = max_waiting
        self.wait_seconds = wait_seconds
        self._free = threading.Semaphore(slots)
        self._lock = threading.Lock()
        self._waiting = 0  # calls
        self._waiting_cost = 0  # their windows
        self._window_seconds = 0.05  # a moving mean of a slot's time per window: what Retry-After is estimated from

    @property
    def waiting(self) -> int:
        return self._waiting

    @contextlib.contextmanager
    def slot(self, cost: int = 1) -> Iterator[None]:
        """Hold one slot for the block (`cost`: the call's model windows); raises EmbeddingBusy when the queue has
        no room for the call or no slot frees up in time. A call alone in the queue may wait whatever it costs."""
        if not self._free.acquire(blocking=False):
            with self._lock:
                if self._waiting and self._waiting_cost + cost > self.max_waiting:
                    raise self._busy(f"{self.slots} running and {self._waiting_cost} windows waiting", cost)
                self._waiting += 1
                self._waiting_cost += cost
            try:
                acquired = self._free.acquire(timeout=self.wait_seconds)
            finally:
                with self._lock:
                    self._waiting -= 1
                    self._waiting_cost -= cost
            if not acquired:
                raise self._busy(f"no slot of {self.slots} came free within {self.wait_seconds:g} s", cost)
        started = time.monotonic()
        try:
            yield
        finally:
            held = time.monotonic() - started
            self._free.release()
            with self._lock:
                self._window_seconds = 0.8 * self._window_seconds + 0.2 * held / max(1, cost)

    def _busy(self, why: str, cost: int) -> EmbeddingBusy:
        ahead = self._window_seconds * (self._waiting_cost + cost) / self.slots
        retry_after = max(1, min(60, math.ceil(ahead)))
        return EmbeddingBusy(
            f"this gateway process is busy embedding ({why}; MNEMOFLOW_GATEWAY_EMBED_CONCURRENCY, "
            f"MNEMOFLOW_GATEWAY_EMBED_QUEUE). Retry in {retry_after} s.",
            details={"slots": self.slots, "waiting": self._waiting, "retry_after_seconds": retry_after},
            retry_after=retry_after,
        )


class GatedEmbedder:
    """A provider whose model calls pass through a gate; the same interface otherwise."""

    def __init__(self, inner: EmbeddingProvider, gate: EmbeddingGate) -> None:
        self.inner = inner
        self.gate = gate
        self.name, self.model, self.dim = inner.name, inner.model, inner.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self.gate.slot(self.cost(texts)):
            return self.inner.embed(texts)

    def cost(self, texts: Sequence[str]) -> int:
        """The model windows the texts fill (a context shares its text's window)."""
        return sum(windows(n) for n in token_counts(self.inner, texts))


class GatedContextualEmbedder(GatedEmbedder):
    """A gated provider that can embed a text after its context."""

    inner: ContextualEmbeddingProvider

    def embed_in_context(self, texts: Sequence[str], contexts: Sequence[str]) -> np.ndarray:
        with self.gate.slot(self.cost(texts)):
            return self.inner.embed_in_context(texts, contexts)


IN_PROCESS = frozenset({"local", "static", "synthetic"})  # providers whose work runs on this process's cores


def gated(provider: EmbeddingProvider, gate: EmbeddingGate) -> EmbeddingProvider:
    """`provider` behind `gate` when its model runs in this process; an HTTP provider as it is."""
    if provider.name not in IN_PROCESS:
        return provider
    if isinstance(provider, ContextualEmbeddingProvider):
        return GatedContextualEmbedder(provider, gate)
    return GatedEmbedder(provider, gate)
