"""The `static` provider: model2vec static embeddings, for high-volume ingestion on a CPU.

A static model is one vector per token of a tokenizer's vocabulary, distilled once from a sentence
transformer (here all-MiniLM-L6-v2: `make static-model`, i.e. `python -m infra.build_static_model`).
Embedding a text is tokenising it and averaging its tokens' vectors: no neural network runs, so it is
tens of times faster than the `local` provider, and weaker in quality (see bench/embedding_quality.py).

Run time needs only model2vec's base install (numpy, tokenizers, safetensors); the model is read from
a local directory (model.safetensors, tokenizer.json, config.json) and never from a hub.

Long texts are not truncated: model2vec caps `encode` at 512 tokens by default (and first cuts the
string to 512 × the median token length in characters); here `max_length=None`, so the vector is the
mean over *all* of a text's tokens. A static model has no position embeddings and no attention span,
so nothing limits the length: a long text costs time linear in its length and its vector is the
average of everything in it, which blurs (as mean pooling over windows does in the `local` provider)
but loses nothing silently.

The weights are used as float32 whatever dtype they are stored in (float16, int8 with per-token
weights), so vectors do not carry float16 rounding. A text with no known token ("", or only symbols
the tokenizer does not know) gets the unit vector of the unknown token (or, if the model has none, a
fixed basis vector) rather than a zero row, which a cosine distance could not use.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shared.embedding.base import normalize_rows
from shared.embedding.local import ModelUnavailable

DEFAULT_MODEL_DIRNAME = "minilm-static-256"
MODEL_FILES = ("model.safetensors", "tokenizer.json", "config.json")
_HASHED_FILES = ("model.safetensors", "tokenizer.json")  # what decides the vectors
_ID_HASH_CHARS = 12


def default_model_path(data_dir: Path) -> Path:
    """Where `make static-model` puts the distilled model: <data_dir>/models/minilm-static-256."""
    return data_dir / "models" / DEFAULT_MODEL_DIRNAME


def model_content_hash(path: Path) -> str:
    """sha256 over the weights and the tokenizer of a model directory (hex)."""
    digest = hashlib.sha256()
    for name in _HASHED_FILES:
        digest.update(name.encode())
        with (path / name).open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def check_model_dir(path: Path) -> None:
    """Raise ModelUnavailable, saying how to build the model, unless `path` is a model2vec directory."""
    if not path.is_dir():
        raise ModelUnavailable(
            f"no static embedding model at {path}: run `make static-model` (python -m infra.build_static_model) "
            "to distill it from the packaged MiniLM once, or set MNEMOFLOW_STATIC_MODEL_PATH to a model2vec directory"
        )
    missing = [name for name in MODEL_FILES if not (path / name).is_file()]
    if missing:
        raise ModelUnavailable(
            f"{path} is not a complete model2vec model (missing {', '.join(missing)}): "
            "rebuild it with `make static-model` (python -m infra.build_static_model --force)"
        )


class StaticEmbedder:
    """A model2vec model directory as an embedding provider; thread-safe for concurrent `embed` calls."""

    name = "static"

    def __init__(self, path: Path, *, batch_size: int = 1024) -> None:
        path = Path(path)
        check_model_dir(path)
        try:
            from model2vec import StaticModel
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ModelUnavailable(
                "the `static` embedding provider needs the model2vec package: pip install model2vec==0.10.0"
            ) from exc

        # A path that exists is read as a local directory; model2vec only asks a hub for names that don't.
        model: Any = StaticModel.from_pretrained(path.resolve(), normalize=True, max_length=None)
        # Compute in float32 whatever the stored dtype (float16 means in float16 would round the vectors).
        model.embedding = np.asarray(model.embedding, dtype=np.float32)
        if model.weights is not None:
            model.weights = np.asarray(model.weights, dtype=np.float32)
        self._model = model
        self.path = path
        self.batch_size = batch_size
        self.dim: int = int(model.dim)
        self.model: str = f"{path.name}@{model_content_hash(path)[:_ID_HASH_CHARS]}"
        self._blank = self._blank_vector()
        self._lock = threading.Lock()  # model2vec's encode sets the tokenizer's truncation on every call

    def _blank_vector(self) -> np.ndarray:
        """The unit vector for texts without a known token: the unknown token's, else the first axis."""
        vector = np.zeros(self.dim, dtype=np.float32)
        unk = self._model.unk_token_id
        if unk is not None:
            row = self._model.token_mapping[unk] if self._model.token_mapping is not None else unk
            vector = np.array(self._model.embedding[row], dtype=np.float32)
            if self._model.weights is not None:
                vector = vector * self._model.weights[unk]
        if not np.any(vector):
            vector = np.zeros(self.dim, dtype=np.float32)
            vector[0] = 1.0
        return normalize_rows(vector[None, :])[0]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Shape (len(texts), dim), float32 unit rows: the mean of each text's token vectors, all tokens."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            matrix = self._model.encode(
                list(texts),
                max_length=None,
                normalize=False,
                batch_size=self.batch_size,
                use_multiprocessing=False,
                show_progress_bar=False,
            )
        matrix = np.asarray(matrix, dtype=np.float32).reshape(len(texts), self.dim)
        out = normalize_rows(matrix)
        blank = ~out.any(axis=1)
        if blank.any():
            out[blank] = self._blank
        return out
