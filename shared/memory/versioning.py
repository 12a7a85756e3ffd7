"""The write path's update step: each new memory that says a fact changed supersedes the earlier memory it updates.

The decision is `shared.memory.updates` (pure); this reads what it needs (the new memory's nearest memories of the
tenant, in every sector) and records it (`shared.storage.versions`). Called by `MemoryEngine.store`, so every path
that stores memories through it (a single add, a batch's or a sequence's chunks) decides the same way, in the
transaction that stores them: a redelivered chunk stores nothing new and so decides nothing twice. A text merged
into an earlier memory of the same fact is kept in that memory's history (`record_merges`).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from shared.embedding import EmbeddingProvider
from shared.embedding.base import embed_texts
from shared.memory.updates import Decision, Earlier, UpdateRules, a_statement, change_cue, decide
from shared.storage import memories as memory_store
from shared.storage import search as search_store
from shared.storage import versions as version_store
from shared.storage.rows import MemoryFilter, NewMemory, SectorVector, StoredRef
from shared.text import normalize_content


def supersede_older(
    session: Session,
    embedders: Mapping[str, EmbeddingProvider],
    rules: UpdateRules,
    ladder: Callable[[int], Sequence[int]],
    created: Sequence[tuple[uuid.UUID, NewMemory]],
) -> list[Decision]:
    """Decide for each stored memory and record the supersessions; only texts with a change cue are searched for (a
    few in a hundred turns). `embedders`: each sector's model, to search every sector the memory's vectors fit."""
    decisions = []
    for memory_id, memory in created:
        if not rules.on or not a_statement(memory.content) or change_cue(memory.content) is None:
            continue
        when, earlier = _nearest_earlier(session, embedders, rules, ladder, memory_id, memory)
        decision = decide(memory.content, memory.meta, when, earlier, rules)
        if decision is None:
            continue
        detail: dict[str, Any] = {"cue": decision.cue, "similarity": round(decision.similarity, 3)}
        if decision.margin is not None:  # the lead over the next current near memory
            detail["margin"] = round(decision.margin, 3)
        pair = (memory_id, decision.replaces)
        if version_store.supersede(session, memory.user_id, [pair], by="write", detail=detail):
            decisions.append(decision)
    return decisions


def _nearest_earlier(
    session: Session,
    embedders: Mapping[str, EmbeddingProvider],
    rules: UpdateRules,
    ladder: Callable[[int], Sequence[int]],
    memory_id: uuid.UUID,
    memory: NewMemory,
) -> tuple[datetime, list[Earlier]]:
    """When the new memory happened, and its nearest memories of the tenant (itself excluded) with their cosines to it.

    Compared as texts alone: a turn of a conversation is stored embedded after the turns before it, which pulls its
    vector towards its session (the replaced statement fell from the new one's nearest to 2nd-4th on updates-dev,
    its lead over the next from 0.09-0.57 to 0.03-0.21). So the new text is embedded alone to search the tenant's
    vectors (every sector of its model, indexed and fresh: an earlier item of the same batch counts), and the
    nearest few found are embedded alone again to be compared (one call for `rules.candidates` short texts: the
    update's statement was among the 4 nearest in every dev case, 1st in 19 of 20)."""
    provider = embedders[memory.primary_sector]
    (alone,) = _unit(embed_texts(provider, [normalize_content(memory.content)]))
    query = SectorVector(provider.model, alone)
    queries = {sector: query for sector, p in embedders.items() if p.model == provider.model}
    found = search_store.dense_candidates(
        session, memory.user_id, queries, limit=rules.candidates + 1, where=MemoryFilter(), ladder=ladder
    )
    nearest = [i for i, _ in found if i != memory_id][: rules.candidates]  # best first, every sector's merged
    rows = memory_store.version_rows(session, memory.user_id, [memory_id, *nearest])
    when = next(r["happened"] for r in rows if r["id"] == memory_id)
    others = [r for r in rows if r["id"] != memory_id]
    if not others:
        return when, []
    similarity = _unit(embed_texts(provider, [normalize_content(r["content"]) for r in others])) @ alone
    return when, [
        Earlier(r["id"], r["content"], r["meta"], r["happened"], float(sim), r["status"] != "superseded")
        for r, sim in zip(others, similarity, strict=True)
    ]


def _unit(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def record_merges(session: Session, memories: Sequence[NewMemory], refs: Sequence[StoredRef]) -> None:
    """A text that said what an earlier memory says is that memory; the earlier one keeps its own content, tags,
    metadata, time and place in its conversation, and its history keeps the merged text with its labels."""
    by_user: dict[str, list[tuple[uuid.UUID, str, uuid.UUID | None, str | None, dict[str, Any]]]] = defaultdict(list)
    for memory, ref in zip(memories, refs, strict=True):
        if ref.merged:
            detail: dict[str, Any] = {"by": "write", "tags": list(memory.tags), "metadata": memory.meta}
            if memory.occurred_at is not None:
                detail["occurred_at"] = memory.occurred_at.isoformat()
            by_user[memory.user_id].append((ref.id, "merged", None, memory.content, detail))
    for user_id, rows in by_user.items():
        version_store.record(session, user_id, rows)
