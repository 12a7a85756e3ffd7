"""What embedding a text costs: its tokens, counted by the model's own tokenizer where this process has one, and
the model windows they fill (the unit the tenants' quotas charge).

Characters are not the cost: 99,000 `>` are 99,000 MiniLM tokens (486 windows) where 99,000 characters of English
are ~17,000 (86 windows), and one Hangul syllable is three tokens."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from shared.text import estimate_tokens

WINDOW_TOKENS = 256  # one pass of MiniLM's window: the unit of model work a quota counts


@runtime_checkable
class TokenCounter(Protocol):
    """A provider that can count tokens with its model's tokenizer."""

    # The most tokens its tokenizer makes of one character: a text of n characters is at most n times this.
    max_tokens_per_char: int

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Each text's tokens, without the model's special tokens."""
        ...


def _counter(embedder: object) -> TokenCounter | None:
    """The tokenizer behind a provider or the wrappers around it (a cache, a concurrency gate)."""
    while embedder is not None:
        if isinstance(embedder, TokenCounter):
            return embedder
        embedder = getattr(embedder, "inner", None)
    return None


def token_counts(embedder: object, texts: Sequence[str], *, exact_above: int = WINDOW_TOKENS) -> list[int]:
    """Each text's tokens for `embedder`'s model: exact wherever a text could hold more than `exact_above`; for
    the shorter ones an upper bound of at most `exact_above`, read from the length, so that most texts (chat turns,
    queries) are never tokenised twice. Providers without a tokenizer here (HTTP, synthetic, static) count by the
    CJK-aware estimate (`shared.text.estimate_tokens`)."""
    counter = _counter(embedder)
    if counter is None:
        return [estimate_tokens(t) for t in texts]
    bounds = [counter.max_tokens_per_char * len(t) for t in texts]
    longer = [i for i, bound in enumerate(bounds) if bound > exact_above]
    if longer:
        for i, count in zip(longer, counter.count_tokens([texts[i] for i in longer]), strict=True):
            bounds[i] = count
    return bounds


def windows(tokens: int) -> int:
    """Model windows a text of `tokens` fills: what a quota charges for it (at least one)."""
    return max(1, math.ceil(tokens / WINDOW_TOKENS))
