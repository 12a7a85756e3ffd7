"""Sequences (a conversation's turns, a document's chunks): what a memory is embedded after.

A turn answers in the words of the turns before it ("the early one, at seven" after "which ferry do you
take?"), so a memory that follows others is embedded after the last few of them, by the providers that can
(the local model, synthetic). One rule for a batch's items and for stored memories, so a re-embed or a
regeneration reproduces the vector a batch gave.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


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
