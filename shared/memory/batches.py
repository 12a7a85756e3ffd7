"""A batch request planned into its job's chunks (the gateway's half of `POST /memory/batch`).

Each item is checked against the input limits, classified (its primary sector picks the queue that embeds it)
and, in a `sequence` batch, given its place and the turns it follows; then the items are cut into chunks of
one sector each. The workers store the chunks (`shared.memory.chunks`).
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.api.memories import BatchRequest
from shared.jobs import ChunkItem, ChunkSpec, Classified, plan_chunks
from shared.memory.limits import InputLimits
from shared.memory.sectors import classify
from shared.memory.sequence import SequenceContext
from shared.text import normalize_content


def plan_batch(
    body: BatchRequest,
    *,
    limits: InputLimits,
    context: SequenceContext,
    chunk_size: int,
    tokens: Sequence[int] | None = None,
) -> list[ChunkSpec]:
    """The chunks that store `body`'s items; InvalidInput (422) names the first item over a limit. `tokens`: each
    item's tokens for the embedding model (`MemoryEngine.tokens`), checked against the token limit."""
    limits.check_batch(len(body.items))
    contexts = context.of_sequence([item.content for item in body.items]) if body.sequence else None
    planned = []
    for i, item in enumerate(body.items):
        limits.check_item(item.content, item.tags, item.metadata, where=f"items[{i}]")
        if tokens is not None:
            limits.check_tokens(tokens[i], where=f"items[{i}]")
        classification = classify(normalize_content(item.content))
        stored = ChunkItem.store(
            item,
            classified=Classified(sectors=list(classification.sectors), confidence=classification.confidence),
            position=i if body.sequence else None,
            index=i,
            context=(contexts[i] or None) if contexts else None,
        )
        planned.append((classification.primary, stored))
    return plan_chunks(planned, size=chunk_size)
