"""What use does to memories: a query's reinforcement of its hits, and the regeneration of decayed hits.

Both run on the maintenance queue after the query has answered (the gateway sends them, gathered), once per
query even when the message is delivered twice.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence

from sqlalchemy.orm import Session

from shared.memory.engine import MemoryEngine
from shared.storage import embed_logs as embed_log_store
from shared.storage import jobs as job_store
from shared.storage import memories as memory_store
from shared.storage import vectors as vector_store
from shared.storage import waypoints as waypoint_store
from shared.storage.sector_models import guard_store_model
from shared.text import normalize_content

log = logging.getLogger("mnemoflow.memory")


def reinforce_hits(
    engine: MemoryEngine,
    session: Session,
    *,
    event_id: str,
    user_id: str,
    memory_ids: Sequence[uuid.UUID],
    traversed: Sequence[tuple[uuid.UUID, uuid.UUID]],
    reinforce: bool = True,
) -> bool:
    """Apply a query's reinforcement once (decay seed: salience + 0.5, last_seen_at = now; architecture seed:
    +0.05 per traversed link). False when this event was applied before (a redelivered message)."""
    if not job_store.try_mark_event(session, event_id):
        return False
    if reinforce:
        memory_store.reinforce(session, user_id, memory_ids, boost=engine.reinforcement.query_boost, returned=True)
        # A traversed link may be stored in either direction.
        pairs = list(traversed) + [(dst, src) for src, dst in traversed]
        rules = engine.waypoints
        waypoint_store.strengthen_waypoints(session, user_id, pairs, step=rules.reinforce_step, cap=rules.max_weight)
    return True


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
