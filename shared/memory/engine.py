"""The write path: classify, embed, store and link memories (the HSG model's write side).

Functions take an open session and never commit: the request or task that called them does. The read path is
`shared.retrieval.service`; the storing of a job's chunks, `shared.memory.chunks`; reinforcement and
regeneration, `shared.lifecycle.reinforcement`.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from shared.api.memories import MemoryCreate
from shared.config import Settings
from shared.embedding import EmbeddingProvider
from shared.embedding.calls import EmbedCall, embed_timed
from shared.errors import Conflict, NotFound
from shared.memory import sectors as sector_rules
from shared.memory.sectors import group_sectors
from shared.memory.sequence import conversation_key
from shared.storage import bm25
from shared.storage import conversations as conversation_store
from shared.storage import embed_logs as embed_log_store
from shared.storage import memories as memory_store
from shared.storage import vectors as vector_store
from shared.storage import waypoints as waypoint_store
from shared.storage.rows import NewMemory, SectorVector, StoredRef
from shared.storage.sector_models import guard_store_model, per_sector
from shared.text import hash_normalized, normalize_content

ChunkClassification = tuple[Sequence[str], float]  # sectors (primary first), confidence


class MemoryEngine:
    """Stateless apart from its settings and embedders; one per process."""

    def __init__(
        self,
        settings: Settings,
        embedder: EmbeddingProvider,
        *,
        sector_embedders: Mapping[str, EmbeddingProvider] | None = None,
    ) -> None:
        self.settings = settings
        self.embedder = embedder  # the default provider (every sector's, in simple mode)
        # Advanced mode (architecture seed): a sector may have a model of its own.
        self.embedders = per_sector(sector_embedders or embedder)
        self.limits = settings.limits
        self.context = settings.context
        self.waypoints = settings.waypoints
        self.reinforcement = settings.reinforcement

    def prepare(
        self,
        items: Sequence[MemoryCreate],
        user_id: str,
        classified: Sequence[ChunkClassification | None] | None = None,
        contexts: Sequence[str] | None = None,
    ) -> tuple[list[NewMemory], list[EmbedCall]]:
        """Classify, hash and embed a batch of items (one provider call for the whole batch).

        `classified`: the (sectors, confidence) the gateway already found when it routed the items.
        `contexts`: what each item follows in its sequence ("" for nothing), to embed it after that.
        """
        texts = [normalize_content(item.content) for item in items]
        classes: list[ChunkClassification] = []
        for i, text_ in enumerate(texts):
            known = classified[i] if classified else None
            if known is None:
                cls = sector_rules.classify(text_)
                known = (cls.sectors, cls.confidence)
            classes.append(known)
        vectors, calls = self.embed_by_sector(texts, [sectors for sectors, _ in classes], contexts)
        prepared = []
        for i, (item, text_) in enumerate(zip(items, texts, strict=True)):
            sectors, confidence = classes[i]
            config = sector_rules.SECTOR_CONFIGS[sectors[0]]
            salience = item.salience
            if salience is None:
                salience = self.reinforcement.initial_salience(len(sectors))
            prepared.append(
                NewMemory(
                    user_id=user_id,
                    content=item.content,
                    content_hash=hash_normalized(text_),
                    primary_sector=sectors[0],
                    sectors=tuple(sectors),
                    tags=tuple(item.tags),
                    meta=item.metadata,
                    salience=salience,
                    decay_lambda=config.decay_lambda,
                    confidence=item.confidence,
                    classification_confidence=confidence,
                    vectors=vectors[i],
                    occurred_at=item.occurred_at,
                )
            )
        return prepared, calls

    def embed_by_sector(
        self, texts: Sequence[str], sectors: Sequence[Sequence[str]], contexts: Sequence[str] | None = None
    ) -> tuple[list[dict[str, SectorVector]], list[EmbedCall]]:
        """Each text's vector in each of its sectors: one provider call per model for the texts with a sector of
        that model (one call in simple mode), the same vector shared by that model's sectors. `contexts`: what
        each text follows, for the providers that can embed a text after its context (normalised here, as the
        texts are by the callers)."""
        contexts = [normalize_content(c) for c in contexts] if contexts else None
        vectors: list[dict[str, SectorVector]] = [{} for _ in texts]
        calls = []
        for provider, sectors_of_model in group_sectors(self.embedders):
            wanted = [i for i, own in enumerate(sectors) if set(own).intersection(sectors_of_model)]
            if not wanted:
                continue
            embedded, call = embed_timed(
                provider, [texts[i] for i in wanted], [contexts[i] for i in wanted] if contexts else None
            )
            calls.append(call)
            for i, vector in zip(wanted, embedded, strict=True):
                shared_vector = SectorVector(provider.model, np.asarray(vector, dtype=np.float32))
                vectors[i] |= {sector: shared_vector for sector in sectors[i] if sector in sectors_of_model}
        return vectors, calls

    def stored_contexts(
        self, session: Session, user_id: str, memory_ids: Sequence[uuid.UUID], *, inclusive: bool = False
    ) -> list[str]:
        """What each stored memory follows (its `next` predecessors, as a sequence's items are cut); with
        `inclusive`, what a new memory placed after each would follow (the memory itself the last turn)."""
        if not self.context.on:
            return ["" for _ in memory_ids]
        before = waypoint_store.preceding_contents(
            session, user_id, memory_ids, turns=self.context.turns, inclusive=inclusive
        )
        return [self.context.join(before.get(i, [])) for i in memory_ids]

    def store(self, session: Session, memories: Sequence[NewMemory], *, settle: bool) -> list[StoredRef]:
        """Insert prepared memories (idempotent on user + content).

        Either way each new memory's terms are counted into its tenant's BM25 statistics now, so a query's word
        counts include what a bulk import stored a moment ago (counted at its merge instead, they lagged by minutes:
        every word of a tenant importing 100,000 memories looked rare, and a query read all its matches).
        settle=True (single adds): vectors go straight into the HNSW index and each new memory is linked
        to its best match now. settle=False (bulk): vectors land in the fresh tier at COPY speed, are
        searchable at once (their binary codes, then exactly), and `merge_fresh` indexes and links them in the
        background.
        """
        guard_store_model(session, self.embedders)
        refs = memory_store.insert_memories(session, memories, indexed=settle)
        created = [(memory, ref) for memory, ref in zip(memories, refs, strict=True) if ref.created]
        # one statement's locks on the tenant's terms, in one order (two chunks wait for each other, never deadlock)
        bm25.count_terms(session, [ref.id for _, ref in created], sign=1)
        if settle:
            by_sector: dict[str, list[uuid.UUID]] = defaultdict(list)
            for memory, ref in created:
                by_sector[memory.primary_sector].append(ref.id)
            self.link(session, by_sector)
        return refs

    def link(self, session: Session, by_sector: dict[str, list[uuid.UUID]]) -> int:
        """Link each memory (by its primary sector) to its best match; returns links made."""
        return sum(
            waypoint_store.link_to_best_match(
                session,
                ids,
                sector,
                dim=self.embedders[sector].dim,
                model=self.embedders[sector].model,
                threshold=self.waypoints.link_threshold,
            )
            for sector, ids in by_sector.items()
        )

    def merge_fresh(self, session: Session, *, limit: int, analyze: bool = False) -> tuple[int, int]:
        """Index up to `limit` fresh vectors and link their memories (their terms were counted when they were
        stored); returns (vectors merged, links made).

        analyze=True refreshes the touched partitions' statistics before linking (do it every few
        thousand rows of a large merge, or the link searches stop using the HNSW index).
        """
        moved, merged = vector_store.merge_fresh_vectors(session, limit=limit)
        if analyze and merged:
            vector_store.analyze_vectors(session, merged)
        return moved, self.link(session, merged)

    def add(
        self,
        session: Session,
        user_id: str,
        item: MemoryCreate,
        *,
        follows: uuid.UUID | None = None,
        classified: ChunkClassification | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Store one memory now; returns (memory, deduplicated). `follows`: the tenant's memory this one comes
        after in a sequence (linked by a `next` waypoint); without it, the last memory added to the conversation
        its metadata names (`sequence.conversation_key`), if any. A new memory becomes its conversation's last.
        `classified`: its sectors (primary first) and confidence when the caller decides them (a graph node's)."""
        self.limits.check_item(item.content, item.tags, item.metadata)
        if follows is not None and memory_store.get_memory(session, user_id, follows) is None:
            raise NotFound(f"memory {follows} (follows) is not a memory of user_id {user_id!r}")
        conversation = conversation_key(item.metadata)
        after = follows
        if conversation is not None:  # locked until commit: the conversation's next add waits for this one
            head = conversation_store.lock_head(session, user_id, conversation)
            after = follows if follows is not None else head
        contexts = self.stored_contexts(session, user_id, [after], inclusive=True) if after else None
        prepared, calls = self.prepare([item], user_id, [classified] if classified else None, contexts=contexts)
        for call in calls:
            embed_log_store.log_embedding(session, call, purpose="add")
        (ref,) = self.store(session, prepared, settle=True)
        # A duplicate is an earlier memory: it is linked only where the caller said so, and stays where it was.
        if after is not None and (ref.created or follows is not None):
            waypoint_store.link_in_order(session, user_id, [after, ref.id])
        if conversation is not None and ref.created:
            conversation_store.move_head(session, user_id, conversation, ref.id)
        memory = memory_store.get_memory(session, user_id, ref.id)
        assert memory is not None
        return memory, not ref.created

    def update(self, session: Session, user_id: str, memory_id: uuid.UUID, patch: dict[str, Any]) -> dict[str, Any]:
        """Change content (re-classified, re-embedded), tags, metadata, status or occurred_at; BM25 statistics
        follow the change."""
        current = memory_store.get_memory(session, user_id, memory_id)
        if current is None:
            raise NotFound(f"memory {memory_id} not found")
        content, tags, metadata = patch.get("content"), patch.get("tags"), patch.get("metadata")
        self.limits.check_labels(tags or [], metadata or {}, "update")
        prepared = None
        if content is not None and normalize_content(content) != normalize_content(current["content"]):
            self.limits.check_content(content)
            item = MemoryCreate(content=content, tags=current["tags"], metadata=current["metadata"])
            contexts = self.stored_contexts(session, user_id, [memory_id])
            (prepared,), calls = self.prepare([item], user_id, contexts=contexts)
            for call in calls:
                embed_log_store.log_embedding(session, call, purpose="update")
            guard_store_model(session, self.embedders)
            owner = memory_store.content_hash_owner(session, user_id, prepared.content_hash)
            if owner is not None and owner != memory_id:
                raise Conflict(f"another memory ({owner}) already has this content", details={"id": str(owner)})
        # The searchable text is the content and the tags: when either changes, take the memory out of the
        # statistics, change it, put it back (a patch of status, metadata or time leaves the tenant's terms alone).
        retext = prepared is not None or tags is not None
        if retext:
            bm25.count_terms(session, [memory_id], sign=-1)
        if prepared is not None:
            memory_store.replace_content(session, user_id, memory_id, prepared)
        status, occurred_at = patch.get("status"), patch.get("occurred_at")
        if tags is not None or metadata is not None or status is not None or occurred_at is not None:
            memory_store.update_memory_fields(
                session, user_id, memory_id, tags=tags, meta=metadata, status=status, occurred_at=occurred_at
            )
        if retext:
            bm25.count_terms(session, [memory_id], sign=1)
        if prepared is not None:
            self._reembed_followers(session, user_id, memory_id)
        updated = memory_store.get_memory(session, user_id, memory_id)
        assert updated is not None
        return updated

    def _reembed_followers(self, session: Session, user_id: str, memory_id: uuid.UUID) -> int:
        """The turns after an edited memory were embedded after its old text: embed them again after the new
        one. Full-width ones only (a compressed one gets its context when it regenerates); returns how many."""
        followers = waypoint_store.full_width_followers(session, user_id, memory_id, turns=self.context.turns)
        if not followers:
            return 0
        ids = [f.id for f in followers]
        vectors, calls = self.embed_by_sector(
            [normalize_content(f.content) for f in followers],
            [f.sectors for f in followers],
            self.stored_contexts(session, user_id, ids),
        )
        for call in calls:
            embed_log_store.log_embedding(session, call, purpose="update")
        indexed = set(vector_store.settled_ids(session, ids))  # a memory waiting for its merge stays in the fresh tier
        vector_store.swap_vectors(session, [(i, user_id, v, i in indexed) for i, v in zip(ids, vectors, strict=True)])
        return len(ids)

    def delete(self, session: Session, user_id: str, memory_id: uuid.UUID) -> bool:
        """Delete a memory (vectors and waypoints cascade) and take it out of the BM25 statistics."""
        if memory_store.get_memory(session, user_id, memory_id) is None:
            return False
        bm25.count_terms(session, [memory_id], sign=-1)
        return memory_store.delete_memory(session, user_id, memory_id)
