"""The `static` provider on a tiny model2vec model built here (MiniLM's tokenizer, a random matrix).

No distilled model is needed; one extra test uses the real one when `make static-model` has built it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from model2vec import StaticModel
from tokenizers import Tokenizer

from shared.embedding import EmbeddingProvider
from shared.embedding.local import ModelUnavailable, model_files
from shared.embedding.static import StaticEmbedder, default_model_path

ROOT = Path(__file__).resolve().parents[3]
DIM = 24


def make_model(directory: Path, *, seed: int = 0, dtype: type = np.float16) -> Path:
    """A model2vec directory: MiniLM's WordPiece tokenizer, one random vector per vocabulary token."""
    tokenizer = Tokenizer.from_file(str(model_files()[1]))
    vectors: np.ndarray = np.random.default_rng(seed).standard_normal((tokenizer.get_vocab_size(), DIM)).astype(dtype)
    StaticModel(vectors=vectors, tokenizer=tokenizer, normalize=True).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(tmp_path_factory.mktemp("static") / "tiny-static")


@pytest.fixture(scope="module")
def static(model_dir: Path) -> StaticEmbedder:
    return StaticEmbedder(model_dir)


def test_unit_float32_rows_of_the_model_dimension(static: StaticEmbedder):
    assert isinstance(static, EmbeddingProvider)
    assert static.name == "static" and static.dim == DIM
    vectors = static.embed(["Alice prefers green tea in the morning", "", "🙂🙂", "x" * 3])
    assert vectors.shape == (4, DIM) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert static.embed([]).shape == (0, DIM)


def test_deterministic_across_instances(static: StaticEmbedder, model_dir: Path):
    texts = ["the lighthouse keeper logged the storm", "Bob moved to Lisbon in May"]
    np.testing.assert_array_equal(static.embed(texts), StaticEmbedder(model_dir).embed(texts))


def test_batch_equals_one_by_one(static: StaticEmbedder):
    texts = [f"note {i}: " + "word " * (i * 7) + f"ending {i}" for i in range(40)] + ["", "same", "same"]
    together = static.embed(texts)
    one_by_one = np.vstack([static.embed([t]) for t in texts])
    np.testing.assert_allclose(together, one_by_one, atol=1e-6)


def test_is_the_mean_of_the_token_vectors(static: StaticEmbedder, model_dir: Path):
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    ids = tokenizer.encode("green tea", add_special_tokens=False).ids
    matrix = StaticModel.from_pretrained(model_dir).embedding.astype(np.float32)
    expected = matrix[ids].mean(axis=0)
    np.testing.assert_allclose(static.embed(["green tea"])[0], expected / np.linalg.norm(expected), atol=1e-6)


def test_long_texts_are_not_truncated(static: StaticEmbedder, model_dir: Path):
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_truncation()  # model2vec saves its tokenizer truncating at 512
    head = "the lighthouse keeper logged the storm at midnight " * 80
    assert len(tokenizer.encode(head, add_special_tokens=False).ids) > 600  # past model2vec's default 512
    tails = ["and then the quarterly budget was approved " * 8, "so we adopted a small grey kitten " * 8]
    first, second = static.embed([head + tails[0], head + tails[1]])
    assert not np.allclose(first, second, atol=1e-3)  # the tokens past 512 still count...
    assert float(first @ second) > 0.8  # ...by their share of the text: the long shared head keeps them close


def test_missing_directory_says_how_to_build_it(tmp_path: Path):
    with pytest.raises(ModelUnavailable, match="make static-model"):
        StaticEmbedder(tmp_path / "nowhere")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text("{}")
    with pytest.raises(ModelUnavailable, match=r"missing model\.safetensors, tokenizer\.json"):
        StaticEmbedder(tmp_path / "half")


def test_model_id_names_the_directory_and_changes_with_the_weights(tmp_path: Path, static: StaticEmbedder):
    same = StaticEmbedder(make_model(tmp_path / "a" / "tiny-static", seed=0))
    other = StaticEmbedder(make_model(tmp_path / "b" / "tiny-static", seed=1))
    assert static.model.startswith("tiny-static@")
    assert same.model == static.model
    assert other.model != static.model
    assert not np.allclose(other.embed(["green tea"]), static.embed(["green tea"]))


def test_float16_weights_are_averaged_in_float32(static: StaticEmbedder, model_dir: Path):
    """model2vec alone would average float16 weights in float16 and round the vectors to ~1e-3."""
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    text = " ".join(tokenizer.id_to_token(i) or "" for i in range(2000, 2300))
    stored = StaticModel.from_pretrained(model_dir).embedding
    assert stored.dtype == np.float16
    expected = stored[tokenizer.encode(text, add_special_tokens=False).ids].astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(static.embed([text])[0], expected / np.linalg.norm(expected), atol=1e-6)


def _distilled_model() -> Path:
    data_dir = Path(os.environ.get("MNEMOFLOW_DATA_DIR") or ROOT / ".mnemoflow")
    return default_model_path(data_dir if data_dir.is_absolute() else ROOT / data_dir)


@pytest.mark.skipif(not _distilled_model().is_dir(), reason="no distilled model: `make static-model` builds it")
def test_distilled_model_ranks_a_paraphrase_above_an_unrelated_sentence():
    static = StaticEmbedder(_distilled_model())
    assert static.dim == 256
    eat, bread, movie = static.embed(
        ["A man is eating food.", "A man is eating a piece of bread.", "The new movie is awesome."]
    )
    assert float(eat @ bread) > float(eat @ movie) + 0.2
    dog, canine, budget = static.embed(
        ["my dog loves the park", "the canine enjoys green spaces", "quarterly revenue rose by four percent"]
    )
    assert float(dog @ canine) > float(dog @ budget)
