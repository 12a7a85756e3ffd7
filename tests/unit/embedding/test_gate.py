"""The gateway's embedding gate: a few model calls at once, a bounded queue, a 503 with Retry-After past it."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from shared.embedding.base import ContextualEmbeddingProvider
from shared.embedding.calls import embed_timed
from shared.embedding.cost import token_counts, windows
from shared.embedding.gate import EmbeddingBusy, EmbeddingGate, GatedEmbedder, gated
from shared.embedding.synthetic import SyntheticEmbedder


class Blocking(SyntheticEmbedder):
    """A model that holds its call until told to go on."""

    def __init__(self) -> None:
        super().__init__(dim=8)
        self.entered = threading.Semaphore(0)
        self.go = threading.Event()

    def embed(self, texts):
        self.entered.release()
        self.go.wait(10)
        return super().embed(texts)


def _in_thread(fn) -> threading.Thread:
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    return thread


def test_calls_beyond_the_slots_and_the_queue_are_refused_with_retry_after():
    model = Blocking()
    gate = EmbeddingGate(1, max_waiting=1, wait_seconds=10)
    embedder = gated(model, gate)
    results: list[np.ndarray] = []
    running = _in_thread(lambda: results.append(embedder.embed(["first"])))
    assert model.entered.acquire(timeout=5)  # the one slot is taken
    waiting = _in_thread(lambda: results.append(embedder.embed(["second"])))
    while gate.waiting < 1:  # the second call queues
        threading.Event().wait(0.01)
    with pytest.raises(EmbeddingBusy) as refused:
        embedder.embed(["third"])
    assert refused.value.status_code == 503 and refused.value.retry_after >= 1
    assert "MNEMOFLOW_GATEWAY_EMBED_QUEUE" in refused.value.message
    model.go.set()
    running.join(5)
    waiting.join(5)
    assert len(results) == 2  # the queued one ran once the slot came free


def test_a_call_that_waits_past_its_time_is_refused_and_frees_its_place():
    model = Blocking()
    gate = EmbeddingGate(1, max_waiting=4, wait_seconds=0.05)
    embedder = gated(model, gate)
    holder = _in_thread(lambda: embedder.embed(["holds the slot"]))
    assert model.entered.acquire(timeout=5)
    with pytest.raises(EmbeddingBusy, match=r"within 0\.05 s"):
        embedder.embed(["waits"])
    assert gate.waiting == 0
    model.go.set()
    holder.join(5)
    assert embedder.embed(["after"]).shape == (1, 8)  # the slot was given back


def test_a_refusal_is_not_a_provider_failure():
    gate = EmbeddingGate(1, max_waiting=0, wait_seconds=1)
    model = Blocking()
    embedder = gated(model, gate)
    holder = _in_thread(lambda: embedder.embed(["holds"]))
    assert model.entered.acquire(timeout=5)
    with pytest.raises(EmbeddingBusy):  # not EmbeddingFailed: nothing was asked of the provider, nothing to log
        embed_timed(embedder, ["refused"])
    model.go.set()
    holder.join(5)


def test_gated_keeps_what_the_provider_can_do_and_leaves_remote_ones_alone():
    gate = EmbeddingGate(2, max_waiting=2, wait_seconds=1)
    synthetic = SyntheticEmbedder(dim=8)
    wrapped = gated(synthetic, gate)
    assert isinstance(wrapped, ContextualEmbeddingProvider) and (wrapped.name, wrapped.dim) == ("synthetic", 8)
    np.testing.assert_allclose(wrapped.embed_in_context(["b"], ["a"]), synthetic.embed_in_context(["b"], ["a"]))

    class Remote:
        name, model, dim = "openai", "text-embedding-3-small", 8

        def embed(self, texts):
            return np.ones((len(texts), 8), dtype=np.float32)

    remote = Remote()
    assert gated(remote, gate) is remote  # an HTTP provider's server bounds its own work
    plain = GatedEmbedder(remote, gate)
    assert not isinstance(plain, ContextualEmbeddingProvider)


def test_providers_without_a_tokenizer_count_by_the_estimate_and_pay_by_windows():
    assert token_counts(SyntheticEmbedder(dim=8), ["abcd" * 100, "日本語"]) == [100, 3]
    assert [windows(n) for n in (0, 1, 256, 257, 8_192)] == [1, 1, 1, 2, 32]


def test_a_gate_needs_a_slot():
    with pytest.raises(ValueError):
        EmbeddingGate(0, max_waiting=1, wait_seconds=1)


def test_the_queue_is_counted_in_windows_so_cheap_calls_wait_where_costly_ones_are_refused():
    model = Blocking()
    gate = EmbeddingGate(1, max_waiting=4, wait_seconds=10)
    embedder = gated(model, gate)
    holder = _in_thread(lambda: embedder.embed(["holds the slot"]))
    assert model.entered.acquire(timeout=5)
    cheap = [_in_thread(lambda: embedder.embed(["a short question"])) for _ in range(3)]
    while gate.waiting < 3:
        threading.Event().wait(0.01)
    with pytest.raises(EmbeddingBusy, match="3 windows waiting"):
        embedder.embed(["word " * 300])  # 375 tokens by the estimate: 2 windows, and 3 + 2 > 4
    model.go.set()
    for thread in [holder, *cheap]:
        thread.join(5)
    assert gate.waiting == 0


def test_a_call_alone_in_the_queue_waits_whatever_it_costs():
    model = Blocking()
    gate = EmbeddingGate(1, max_waiting=1, wait_seconds=10)
    embedder = gated(model, gate)
    holder = _in_thread(lambda: embedder.embed(["holds the slot"]))
    assert model.entered.acquire(timeout=5)
    done: list[np.ndarray] = []
    costly = _in_thread(lambda: done.append(embedder.embed(["word " * 2_000])))  # 40 windows
    while gate.waiting < 1:
        threading.Event().wait(0.01)
    model.go.set()
    holder.join(5)
    costly.join(5)
    assert len(done) == 1 and done[0].shape == (1, 8)
