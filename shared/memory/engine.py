"""The write path: classify, embed, store and link memories (the HSG model's write side).

Functions take an open session and never commit: the request or task that called them does. The read path is
`shared.retrieval.service`; the storing of a job's chunks, `shared.memory.chunks`; reinforcement and
regeneration, `shared.lifecycle.reinforcement`.
"""

from __future__ import annotations

import contextlib
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from shared.api.memories import MemoryCreate
from shared.config import Settings
from shared.embedding import EmbeddingProvider
from shared.embedding.calls import EmbedCall, embed_timed
from shared.embedding.cost import token_counts
from shared.errors import Conflict, NotFound
from shared.jobs import ChunkItem
from shared.memory import sectors as sector_rules
from shared.memory.sectors import group_sectors
from shared.memory.sequence import conversation_key
from shared.memory.versioning import record_merges, supersede_older
from shared.storage import bm25
from shared.storage import conversations as conversation_store
from shared.storage import embed_logs as embed_log_store
from shared.storage import memories as memory_store
from shared.storage import vectors as vector_store
from shared.storage import versions as version_store
from shared.storage import waypoints as waypoint_store
from shared.storage.rows import NewMemory, SectorVector, StoredRef
from shared.storage.sector_models import guard_store_model, per_sector
from shared.text import fact_hash, hash_normalized, normalize_content

ChunkClassification = tuple[Sequence[str], float]  # sectors (primary first), confidence
# A short session of its own for what a write reads before it embeds (the gateway's: `db.reading(tenant)`), so
# that no pooled connection is held while the model runs.
Reading = Callable[[], AbstractContextManager[Session]]


def _before_embedding(session: Session, reading: Reading | None) -> AbstractContextManager[Session]:
    """Where a write reads what it needs before the model runs: a short session of its own, else its own."""
    return reading() if reading is not None else contextlib.nullcontext(session)


@dataclass(frozen=True)
class _Rewrite:
    """A memory's new content and what its vectors and those of the turns after it are embedded after."""

    item: MemoryCreate
    contexts: list[str]
    followers: list[waypoint_store.Follower]
    follower_contexts: list[str]


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
        self.updates = settings.updates
        self.dedup_facts = settings.dedup_facts
        self.ladder = settings.compression.ladder

    def tokens(self, texts: Sequence[str]) -> list[int]:
        """Each text's tokens for the models that embed it (the most any of them counts), exact past a window."""
        providers = list({id(p): p for p in self.embedders.values()}.values())
        counts = [token_counts(provider, texts) for provider in providers]
        return [max(each) for each in zip(*counts, strict=True)]

    def check_content(self, content: str, where: str = "content") -> int:
        """The content's character and token limits; returns its tokens."""
        self.limits.check_content(content, where)
        (tokens,) = self.tokens([content])
        self.limits.check_tokens(tokens, where)
        return tokens

    def prepare(
        self,
        items: Sequence[MemoryCreate | ChunkItem],
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
                    fact_hash=fact_hash(text_) if self.dedup_facts else None,
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
        record_merges(session, memories, refs)
        # one statement's locks on the tenant's terms, in one order (two chunks wait for each other, never deadlock)
        bm25.count_terms(session, [ref.id for _, ref in created], sign=1)
        if settle:
            by_sector: dict[str, list[uuid.UUID]] = defaultdict(list)
            for memory, ref in created:
                by_sector[memory.primary_sector].append(ref.id)
            self.link(session, by_sector)
        supersede_older(session, self.embedders, self.updates, self.ladder, [(ref.id, m) for m, ref in created])
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

        analyze=True refreshes the vector table's statistics before linking (do it every few
        thousand rows of a large merge, or the link searches stop using the HNSW index).
        """
        moved, merged = vector_store.merge_fresh_vectors(session, limit=limit)
        if analyze and merged:
            vector_store.analyze_vectors(session)
        return moved, self.link(session, merged)

    def add(
        self,
        session: Session,
        user_id: str,
        item: MemoryCreate,
        *,
        follows: uuid.UUID | None = None,
        classified: ChunkClassification | None = None,
        reading: Reading | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Store one memory now; returns (memory, deduplicated). `follows`: the tenant's memory this one comes
        after in a sequence (linked by a `next` waypoint); without it, the last memory added to the conversation
        its metadata names (`sequence.conversation_key`), if any. A new memory becomes its conversation's last.
        `classified`: its sectors (primary first) and confidence when the caller decides them (a graph node's).
        `reading`: where to read what it follows before embedding it (else `session`, which then holds its
        connection while the model runs)."""
        self.limits.check_labels(item.tags, item.metadata, "content")
        self.check_content(item.content)
        conversation = conversation_key(item.metadata)
        after, contexts = follows, None
        if follows is not None or conversation is not None:
            with _before_embedding(session, reading) as early:
                if follows is not None and memory_store.get_memory(early, user_id, follows) is None:
                    raise NotFound(f"memory {follows} (follows) is not a memory of user_id {user_id!r}")
                if follows is None:
                    assert conversation is not None
                    after = conversation_store.head(early, user_id, conversation)
                if after is not None:
                    contexts = self.stored_contexts(early, user_id, [after], inclusive=True)
        prepared, calls = self.prepare([item], user_id, [classified] if classified else None, contexts=contexts)
        if conversation is not None:  # locked until commit: the conversation's next add waits for this one
            head = conversation_store.lock_head(session, user_id, conversation)
            # Another add of the conversation may have come in since it was read: linked after that one, this
            # memory keeps the context it was embedded after (two turns at once have no order of their own).
            after = follows if follows is not None else head
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

    def update(
        self,
        session: Session,
        user_id: str,
        memory_id: uuid.UUID,
        patch: dict[str, Any],
        *,
        reading: Reading | None = None,
    ) -> dict[str, Any]:
        """Change content (re-classified, re-embedded, and the turns after it embedded again after it), tags,
        metadata, status or occurred_at; BM25 statistics follow the change. `reading`: as for `add`, where what
        the new vectors need is read before the model runs."""
        content, tags, metadata = patch.get("content"), patch.get("tags"), patch.get("metadata")
        self.limits.check_labels(tags or [], metadata or {}, "update")
        rewrite: _Rewrite | None = None
        with _before_embedding(session, reading) as early:
            current = memory_store.get_memory(early, user_id, memory_id)
            if current is None:
                raise NotFound(f"memory {memory_id} not found")
            if content is not None and normalize_content(content) != normalize_content(current["content"]):
                self.check_content(content)
                rewrite = self._plan_rewrite(early, user_id, memory_id, current, content)
        prepared = None
        if rewrite is not None:  # the model runs here, between the two sessions
            (prepared,), calls = self.prepare([rewrite.item], user_id, contexts=rewrite.contexts)
            followers, more = self._embed_followers(rewrite)
            if reading is not None and memory_store.get_memory(session, user_id, memory_id) is None:
                raise NotFound(f"memory {memory_id} not found")  # deleted while it was embedded
            for call in [*calls, *more]:
                embed_log_store.log_embedding(session, call, purpose="update")
            guard_store_model(session, self.embedders)
            owner = memory_store.content_hash_owner(
                session, user_id, prepared.content_hash, prepared.fact_hash, other_than=memory_id
            )
            if owner is not None:
                raise Conflict(f"another memory ({owner}) already says this", details={"id": str(owner)})
        # The searchable text is the content and the tags: when either changes, take the memory out of the
        # statistics, change it, put it back (a patch of status, metadata or time leaves the tenant's terms alone).
        retext = prepared is not None or tags is not None
        if retext:
            bm25.count_terms(session, [memory_id], sign=-1)
        if prepared is not None:
            memory_store.replace_content(session, user_id, memory_id, prepared)
            version_store.record(session, user_id, [(memory_id, "content", None, current["content"], {})])
        status, occurred_at = patch.get("status"), patch.get("occurred_at")
        if tags is not None or metadata is not None or status is not None or occurred_at is not None:
            memory_store.update_memory_fields(
                session, user_id, memory_id, tags=tags, meta=metadata, status=status, occurred_at=occurred_at
            )
        if retext:
            bm25.count_terms(session, [memory_id], sign=1)
        if rewrite is not None:
            self._swap_followers(session, user_id, memory_id, followers)
        updated = memory_store.get_memory(session, user_id, memory_id)
        if updated is None:  # deleted meanwhile
            raise NotFound(f"memory {memory_id} not found")
        return updated

    def _plan_rewrite(
        self, session: Session, user_id: str, memory_id: uuid.UUID, current: dict[str, Any], content: str
    ) -> _Rewrite:
        """What re-embedding a memory with new content needs, read before the model runs: its own context, and
        the turns after it (full width) with what each follows, the new content in the old one's place."""
        item = MemoryCreate(content=content, tags=current["tags"], metadata=current["metadata"])
        contexts = self.stored_contexts(session, user_id, [memory_id])
        followers = waypoint_store.full_width_followers(
            session, user_id, memory_id, turns=self.context.turns, lock=False
        )
        chains = waypoint_store.preceding_turns(session, user_id, [f.id for f in followers], turns=self.context.turns)
        follower_contexts = [
            self.context.join([content if turn == memory_id else text_ for turn, text_ in chains.get(f.id, [])])
            for f in followers
        ]
        return _Rewrite(item, contexts, followers, follower_contexts)

    def _embed_followers(
        self, rewrite: _Rewrite
    ) -> tuple[list[tuple[waypoint_store.Follower, dict[str, SectorVector]]], list[EmbedCall]]:
        """The turns after an edited memory, embedded again after its new text."""
        if not rewrite.followers:
            return [], []
        vectors, calls = self.embed_by_sector(
            [normalize_content(f.content) for f in rewrite.followers],
            [f.sectors for f in rewrite.followers],
            rewrite.follower_contexts,
        )
        return list(zip(rewrite.followers, vectors, strict=True)), calls

    def _swap_followers(
        self,
        session: Session,
        user_id: str,
        memory_id: uuid.UUID,
        embedded: list[tuple[waypoint_store.Follower, dict[str, SectorVector]]],
    ) -> int:
        """Store the followers' new vectors, for those still as they were read (locked now; one changed or
        compressed meanwhile keeps what its own change gave it); returns how many."""
        if not embedded:
            return 0
        locked = waypoint_store.full_width_followers(session, user_id, memory_id, turns=self.context.turns)
        still = {(f.id, f.content) for f in locked}
        kept = [(f.id, v) for f, v in embedded if (f.id, f.content) in still]
        ids = [i for i, _ in kept]
        indexed = set(vector_store.settled_ids(session, ids))  # a memory waiting for its merge stays in the fresh tier
        vector_store.swap_vectors(session, [(i, user_id, v, i in indexed) for i, v in kept])
        return len(kept)

    def delete(self, session: Session, user_id: str, memory_id: uuid.UUID) -> bool:
        """Delete a memory (vectors, waypoints and history cascade) and take it out of the BM25 statistics."""
        if memory_store.get_memory(session, user_id, memory_id) is None:
            return False
        bm25.count_terms(session, [memory_id], sign=-1)
        replaced = version_store.successors_of(session, user_id, memory_id)
        deleted = memory_store.delete_memory(session, user_id, memory_id)
        # what it replaced is current again, unless something else still replaces it (its link went with it)
        version_store.restore(session, user_id, replaced, because=memory_id, reason="newer memory deleted")
        return deleted
