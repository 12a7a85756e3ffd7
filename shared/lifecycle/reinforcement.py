"""What use does to memories: a query's reinforcement of its hits, and the regeneration of decayed hits.

Both run on the maintenance queue after the query has answered (the gateway sends them, gathered), once per
query even when the message is delivered twice.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.orm import Session

from shared.memory.engine import MemoryEngine
from shared.storage import embed_logs as embed_log_store
from shared.storage import events as event_store
from shared.storage import memories as memory_store
from shared.storage import vectors as vector_store
from shared.storage import waypoints as waypoint_store
from shared.storage.sector_models import guard_store_model
from shared.text import normalize_content

log = logging.getLogger("mnemoflow.memory")


@dataclass(frozen=True)
class QueryUse:
    """What one query did that reinforcement applies: the memories it returned and the links walked to them."""

    event_id: str
    memory_ids: Sequence[uuid.UUID]
    traversed: Sequence[tuple[uuid.UUID, uuid.UUID]] = ()
    reinforce: bool = True  # False: only marked (its regeneration is the caller's)


def reinforce_uses(engine: MemoryEngine, session: Session, user_id: str, uses: Sequence[QueryUse]) -> set[str]:
    """Apply several queries' reinforcement of one tenant, each once (decay seed: salience + 0.5 a query,
    last_seen_at = now; architecture seed: +0.05 a query per traversed link), in three statements however many
    queries there are; the event ids applied now (the others were before: a redelivered message).

    The same as one query after another: a memory two queries returned gains two boosts, capped as the second
    would have been (shared.storage.memories.reinforce_returned); a query that returned a memory twice, or walked
    a link twice, counts once, as before."""
    applied = event_store.try_mark_events(session, list(dict.fromkeys(use.event_id for use in uses)))
    hits: Counter[uuid.UUID] = Counter()
    walked: Counter[tuple[uuid.UUID, uuid.UUID]] = Counter()
    counted: set[str] = set()
    for use in uses:
        if use.event_id not in applied or use.event_id in counted:  # applied before, or twice in this batch
            continue
        counted.add(use.event_id)
        if use.reinforce:
            hits.update(set(use.memory_ids))
            # A traversed link may be stored in either direction.
            walked.update({pair for src, dst in use.traversed for pair in ((src, dst), (dst, src))})
    memory_store.reinforce_returned(session, user_id, hits, boost=engine.reinforcement.query_boost)
    rules = engine.waypoints
    pairs = sorted(walked)  # in one order for every batch (see reinforce_returned)
    waypoint_store.strengthen_waypoints(
        session, user_id, pairs, step=rules.reinforce_step, cap=rules.max_weight, times=[walked[p] for p in pairs]
    )
    return applied


def regenerate(
    engine: MemoryEngine, session: Session, user_id: str, memory_ids: Sequence[uuid.UUID], *, boost: float
) -> list[uuid.UUID]:
    """Decay seed, "Regeneration on Access": re-embed compressed or fingerprinted memories from their original
    content at full dimension, restore them to warm, boost salience. Returns the regenerated ids."""
    decayed = memory_store.lock_decayed(session, user_id, memory_ids)
    if not decayed:
        return []
    guard_store_model(session, engine.embedders)
    embedded, calls = engine.embed_by_sector(
        [normalize_content(m.content) for m in decayed],
        [m.sectors for m in decayed],
        engine.stored_contexts(session, user_id, [m.id for m in decayed]),
    )
    for call in calls:
        embed_log_store.log_embedding(session, call, purpose="regenerate")
    vectors = dict(zip([m.id for m in decayed], embedded, strict=True))
    vector_store.restore_vectors(session, user_id, vectors, boost=boost)
    for memory in decayed:
        log.info("[decay] regenerated memory %s", memory.id)
    return [m.id for m in decayed]
