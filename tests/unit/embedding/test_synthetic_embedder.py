"""The synthetic hash embedder: deterministic, unit length, word overlap shows up as similarity."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from shared.embedding import EmbeddingProvider, SyntheticEmbedder, mean_vector
from shared.embedding.synthetic import CONTEXT_WEIGHT


def test_implements_the_provider_interface():
    embedder = SyntheticEmbedder(dim=128)
    assert isinstance(embedder, EmbeddingProvider)
    assert (embedder.name, embedder.model, embedder.dim) == ("synthetic", "synthetic-hash-v1", 128)


def test_rows_are_float32_unit_vectors():
    rows = SyntheticEmbedder().embed(["one sentence", "and another, longer sentence here", "x"])
    assert rows.shape == (3, 384)
    assert rows.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-6)


def test_no_texts_give_no_rows():
    assert SyntheticEmbedder(dim=16).embed([]).shape == (0, 16)


def test_two_instances_agree_bit_for_bit():
    texts = ["The cat sat on the mat", "Deploy the service with docker compose", "", "ünïcödé wörds 你好"]
    first, second = SyntheticEmbedder().embed(texts), SyntheticEmbedder().embed(texts)
    assert first.tobytes() == second.tobytes()
    assert SyntheticEmbedder().embed(texts[:1]).tobytes() == first[:1].tobytes()


def test_features_come_from_a_stable_hash():
    # "hello": the word (weight 1) and the trigrams of "<hello>" (0.25 each); columns pinned from blake2b,
    # so a salted hash() or a changed feature scheme shows up here.
    row = SyntheticEmbedder(dim=64).embed(["hello"])[0]
    norm = math.sqrt(1 + 5 * 0.25**2)
    expected = np.zeros(64)
    expected[9] = -1 / norm
    expected[[2, 6, 21, 42, 57]] = np.array([1, -1, 1, 1, -1]) * 0.25 / norm
    np.testing.assert_allclose(row, expected, atol=1e-6)


def test_case_and_punctuation_do_not_matter():
    rows = SyntheticEmbedder().embed(["Hello, World!", "hello world"])
    np.testing.assert_array_equal(rows[0], rows[1])


def test_repeated_features_count_sublinearly():
    row = SyntheticEmbedder(dim=64).embed(["hello hello hello"])[0]
    # tf 3 for the word and each trigram → weight × (1 + ln 3); the bigram "hello hello" twice → 0.5 × (1 + ln 2)
    word, bigram = 1 + math.log(3), 0.5 * (1 + math.log(2))
    expected = np.zeros(64)
    expected[9] = -word
    expected[[2, 6, 21, 42, 57]] = np.array([1, -1, 1, 1, -1]) * 0.25 * word
    expected[54] = -bigram
    np.testing.assert_allclose(row, expected / np.linalg.norm(expected), atol=1e-6)


def test_paraphrase_is_closer_than_an_unrelated_sentence():
    a, paraphrase, unrelated = SyntheticEmbedder().embed(
        [
            "The user prefers dark mode in the code editor",
            "In the editor, the user prefers a dark mode",
            "Quarterly revenue grew strongly across Europe",
        ]
    )
    assert float(a @ paraphrase) > 0.5
    assert float(a @ paraphrase) > float(a @ unrelated) + 0.3


def test_shared_character_trigrams_relate_word_forms():
    running, runner, banana = SyntheticEmbedder().embed(["running", "runner", "banana"])
    assert float(running @ runner) > 0.05
    assert float(running @ runner) > abs(float(running @ banana))


def test_featureless_text_gets_a_stable_unit_vector():
    embedder = SyntheticEmbedder()
    rows = embedder.embed(["", "!!!", ""])
    assert not np.isnan(rows).any()
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(rows[0], rows[2])
    assert np.count_nonzero(rows[0]) == 1


def test_dimension_is_validated():
    with pytest.raises(ValueError, match="at least 8"):
        SyntheticEmbedder(dim=4)


def test_mean_vector_is_renormalised():
    mean = mean_vector(np.array([[1.0, 0.0], [0.0, 1.0]]))
    np.testing.assert_allclose(mean, [1 / math.sqrt(2), 1 / math.sqrt(2)], atol=1e-7)
    assert mean.dtype == np.float32


def test_mean_vector_of_cancelling_rows_is_zero_not_nan():
    mean = mean_vector(np.array([[1.0, 0.0], [-1.0, 0.0]]))
    np.testing.assert_array_equal(mean, [0.0, 0.0])


def test_mean_vector_needs_a_row():
    with pytest.raises(ValueError, match="at least one"):
        mean_vector(np.zeros((0, 4)))


def test_throughput_smoke():
    texts = [f"memory {i} about topic {i % 97} and the user's preference number {i % 13}" for i in range(5000)]
    embedder = SyntheticEmbedder()
    started = time.perf_counter()
    rows = embedder.embed(texts)
    elapsed = time.perf_counter() - started
    print(f"synthetic embedder: {len(texts) / elapsed:,.0f} sentences/s ({rows.shape[1]} dims)")
    assert rows.shape == (5000, 384)


def test_in_context_a_text_leans_towards_its_context_and_others_are_unchanged():
    embedder = SyntheticEmbedder(dim=64)
    texts, contexts = ["the early one at seven", "an unrelated note"], ["which ferry on Sundays", ""]
    leaning, plain = embedder.embed_in_context(texts, contexts)
    own, context = embedder.embed([texts[0], contexts[0]])
    expected = own + CONTEXT_WEIGHT * context
    np.testing.assert_allclose(leaning, expected / np.linalg.norm(expected), atol=1e-6)
    np.testing.assert_array_equal(plain, embedder.embed([texts[1]])[0])
    with pytest.raises(ValueError, match="contexts"):
        embedder.embed_in_context(texts, contexts[:1])
