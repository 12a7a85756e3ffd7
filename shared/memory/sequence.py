"""Sequences (a conversation's turns, a document's chunks): what a memory is embedded after, and which conversation
an added memory continues.

A turn answers in the words of the turns before it ("the early one, at seven" after "which ferry do you
take?"), so a memory that follows others is embedded after the last few of them, by the providers that can
(the local model, synthetic). One rule for a batch's items and for stored memories, so a re-embed or a
regeneration reproduces the vector a batch gave.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The metadata keys that name the conversation an added memory belongs to, looked at in this order: a memory whose
# metadata carries one (a non-empty string or an integer) is linked after the previous memory its tenant added
# with the same key and value, as if it had said `follows`. OpenMemory's and LangGraph's clients send
# `session_id` or `thread_id`, others `conversation_id`, mem0 `run_id`. Keys that only scope what is stored
# (`namespace`, `graph_id`, `user_id`, `agent_id`, `app_id`) link nothing: a namespace is not a conversation.
CONVERSATION_KEYS: tuple[str, ...] = ("session_id", "thread_id", "conversation_id", "run_id")
# A longer value is stored as its hash, so a conversation's key always fits its table's index.
MAX_KEY_CHARS = 256


@dataclass(frozen=True)
class SequenceContext:
    """How much of a sequence a memory is embedded after (`Settings.context`); 0 turns or chars: alone."""

    turns: int = 2
    chars: int = 2000  # the context is cut to its last this many characters (the model's window holds fewer)

    @property
    def on(self) -> bool:
        return self.turns > 0 and self.chars > 0

    def join(self, turns: Sequence[str]) -> str:
        """The turns a memory follows as what it is embedded after: one per line, the last `chars` characters."""
        return joined_context(turns, self.chars)

    def of_sequence(self, contents: Sequence[str]) -> list[str]:
        """What each item of a sequence is embedded after (see `sequence_contexts`)."""
        return sequence_contexts(contents, turns=self.turns, chars=self.chars)


def joined_context(turns: Sequence[str], chars: int) -> str:
    """The turns a memory follows as what it is embedded after: one per line, the last `chars` characters.
    One rule for a batch's items and for stored memories, so a re-embed reproduces a batch's vector."""
    return "\n".join(turns)[-chars:] if chars > 0 else ""


def sequence_contexts(contents: Sequence[str], *, turns: int, chars: int) -> list[str]:
    """What each item of a sequence is embedded after: the `turns` items before it, one per line, cut to the
    last `chars` characters ("" for the first item, or with turns = 0)."""
    if turns <= 0:
        return ["" for _ in contents]
    return [joined_context(contents[max(0, i - turns) : i], chars) for i in range(len(contents))]


def conversation_key(metadata: Mapping[str, Any]) -> str | None:
    """The conversation an added memory belongs to, as `name=value` (`session_id=abc`), from the first of
    `CONVERSATION_KEYS` whose value is a non-blank string or an integer; None when none is (nothing inferred)."""
    for name in CONVERSATION_KEYS:
        value = metadata.get(name)
        if isinstance(value, bool) or not isinstance(value, int | str):
            continue
        if isinstance(value, str) and not value.strip():
            continue
        key = f"{name}={value}"
        if len(key) > MAX_KEY_CHARS:
            return f"{name}#sha256:{hashlib.sha256(str(value).encode()).hexdigest()}"
        return key
    return None
