"""The HSG memory engine: write path (classify, embed, store, link) and read path (retrieve, score).

Functions take an open session and never commit: the request or task that called them does.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from shared import documents
from shared import sectors as sector_rules
from shared.config import Settings
from shared.decay import dimension_ladder, pool_to
from shared.embedding import EmbeddingProvider
from shared.embedding.calls import EmbedCall, embed_query_timed, embed_timed
from shared.errors import Conflict, InvalidInput, NotFound
from shared.hot_rows import PAYLOAD_FIELDS, HotRowCache
from shared.packing import Packing, pack
from shared.retrieval import (
    Candidate,
    context_support,
    fuse,
    mmr_order,
    relevance,
    resolve_conflicts,
    score_candidate,
    spread_activation,
)
from shared.schemas import MemoryCreate, QueryFilters, RetrievalOptions
from shared.scoring import ScoreWeights, recency_interpolated
from shared.storage import jobs as job_store
from shared.storage import memories as store
from shared.storage.memories import MemoryFilter, NewMemory, SectorVector
from shared.storage.models import guard_store_model, per_sector
from shared.temporal import query_period
from shared.text import hash_normalized, normalize_content

ChunkClassification = tuple[tuple[str, ...], float]  # sectors (primary first), confidence
log = logging.getLogger("mnemoflow.memory")
CLASSIFICATION_KEY = "_classified"  # a batch chunk item's classification, found by the gateway when routing it
SEQUENCE_KEY = "_position"  # a `sequence` batch item's place in the request (sector chunks lose the order)
CONTEXT_KEY = "_context"  # a `sequence` batch item's previous turns, to embed it after them


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


def chunk_item(item: MemoryCreate, classification: sector_rules.Classification) -> dict[str, Any]:
    """A batch item as a chunk stores it: the item's fields plus the classification that routed it."""
    raw = item.model_dump(mode="json", exclude_none=True, exclude={"user_id"})
    raw[CLASSIFICATION_KEY] = {"sectors": list(classification.sectors), "confidence": classification.confidence}
    return raw


@dataclass
class QueryOutcome:
    """The ranked matches and what should be reinforced afterwards (off the request path)."""

    matches: list[tuple[Candidate, dict[str, Any]]]
    candidates: int
    reinforce_ids: list[uuid.UUID] = field(default_factory=list)
    traversed: list[tuple[uuid.UUID, uuid.UUID]] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)
    packing: Packing | None = None  # when the query set a token budget
    query_sectors: tuple[str, ...] = ()  # the sectors whose vectors were searched
    embed_calls: list[EmbedCall] = field(default_factory=list)  # model calls made for the query (not cache hits)


class _Stopwatch:
    """Milliseconds spent in each named stage of one request."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._started = self._last = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.laps[stage] = round((now - self._last) * 1000, 3)
        self._last = now

    def total(self) -> None:
        """The whole request, start to last lap: less than the stages' sum when some ran side by side."""
        self.laps["total"] = round((self._last - self._started) * 1000, 3)


class MemoryEngine:
    """Stateless apart from its settings and embedder; one per process."""

    def __init__(
        self,
        settings: Settings,
        embedder: EmbeddingProvider,
        *,
        query_embedder: EmbeddingProvider | None = None,
        sector_embedders: Mapping[str, EmbeddingProvider] | None = None,
        sector_query_embedders: Mapping[str, EmbeddingProvider] | None = None,
        row_cache: HotRowCache | None = None,
    ) -> None:
        self.settings = settings
        self.row_cache = row_cache  # hot-tier payloads (the gateway's); without it the payload is one more query
        self.embedder = embedder  # the default provider (every sector's, in simple mode)
        # Advanced mode (architecture seed): a sector may have a model of its own.
        self.embedders = per_sector(sector_embedders or embedder)
        # Queries may go through a cache (same model); stored memories are always embedded afresh.
        self.query_embedder = query_embedder or embedder
        self.query_embedders = per_sector(sector_query_embedders or query_embedder or self.embedders)
        self.ladder = functools.partial(
            dimension_ladder, min_dim=settings.min_vector_dim, max_dim=settings.max_vector_dim
        )  # the rungs a model's vectors compress to (decay)
        self.lexical = store.LexicalParams(
            config=settings.text_search_config,
            k1=settings.bm25_k1,
            b=settings.bm25_b,
            common_ratio=settings.lexical_common_ratio,
            common_min_df=settings.lexical_common_min_df,
            term_frequency=settings.bm25_term_frequency,
            select_budget=settings.lexical_select_budget,
            rescore_window=settings.lexical_rescore_window,
        )
        # Threads for the full-text stage of queries given a second session (created when first needed).
        self._side = (
            ThreadPoolExecutor(settings.query_parallel_threads, thread_name_prefix="mnemoflow-lexical")
            if settings.query_parallel_threads
            else None
        )

    def validate_item(self, item: MemoryCreate, where: str = "content") -> None:
        """Limits a schema cannot express because they are settings."""
        self._check_content(item.content, where)
        self._check_tags_and_metadata(item.tags, item.metadata, where)

    def validate_labels(self, tags: Sequence[str], metadata: dict[str, Any], where: str) -> None:
        """The tag and metadata limits alone (for requests that carry them without content, like ingestion)."""
        self._check_tags_and_metadata(tags, metadata, where)

    def _check_content(self, content: str, where: str) -> None:
        limit = self.settings.max_content_chars
        if len(content) > limit:
            raise InvalidInput(
                f"{where} is {len(content):,} characters; the limit is {limit:,}. Split it into several memories."
            )

    def _check_tags_and_metadata(self, tags: Sequence[str], metadata: dict[str, Any], where: str) -> None:
        s = self.settings
        if len(tags) > s.max_tags:
            raise InvalidInput(f"{where}: {len(tags)} tags; at most {s.max_tags} are allowed")
        long_tags = [t for t in tags if len(t) > s.max_tag_chars]
        if long_tags:
            raise InvalidInput(f"{where}: tag {long_tags[0][:40]!r}… is longer than {s.max_tag_chars} characters")
        if len(json.dumps(metadata)) > s.max_metadata_bytes:
            raise InvalidInput(f"{where}: metadata is larger than {s.max_metadata_bytes:,} bytes of JSON")

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
                salience = min(
                    1.0,
                    self.settings.initial_salience_base
                    + self.settings.initial_salience_per_extra_sector * (len(sectors) - 1),
                )
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
        for provider, sectors_of_model in store.group_sectors(self.embedders):
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
        """What each stored memory follows (its `next` predecessors, as `sequence_contexts` cuts them); with
        `inclusive`, what a new memory placed after each would follow (the memory itself the last turn)."""
        s = self.settings
        if s.embed_context_turns <= 0 or s.embed_context_chars <= 0:
            return ["" for _ in memory_ids]
        before = store.preceding_contents(
            session, user_id, memory_ids, turns=s.embed_context_turns, inclusive=inclusive
        )
        return [joined_context(before.get(i, []), s.embed_context_chars) for i in memory_ids]

    def store(self, session: Session, memories: Sequence[NewMemory], *, settle: bool) -> list[store.StoredRef]:
        """Insert prepared memories (idempotent on user + content).

        settle=True (single adds): vectors go straight into the HNSW index and each new memory is linked
        to its best match now. settle=False (bulk): vectors land in the fresh tier at COPY speed, are
        searched exactly at once, and `merge_fresh` indexes and links them in the background.
        """
        guard_store_model(session, self.embedders)
        refs = store.insert_memories(session, memories, indexed=settle)
        if settle:
            by_sector: dict[str, list[uuid.UUID]] = defaultdict(list)
            for memory, ref in zip(memories, refs, strict=True):
                if ref.created:
                    by_sector[memory.primary_sector].append(ref.id)
            self.settle(session, by_sector)
        return refs

    def settle(self, session: Session, by_sector: dict[str, list[uuid.UUID]]) -> int:
        """Count the memories' terms for BM25 and link each to its best match; returns links made."""
        store.count_terms(session, [i for ids in by_sector.values() for i in ids], sign=1)
        return sum(
            store.link_to_best_match(
                session,
                ids,
                sector,
                dim=self.embedders[sector].dim,
                model=self.embedders[sector].model,
                threshold=self.settings.waypoint_threshold,
            )
            for sector, ids in by_sector.items()
        )

    def merge_fresh(self, session: Session, *, limit: int, analyze: bool = False) -> tuple[int, int]:
        """Index up to `limit` fresh vectors and link their memories; returns (vectors merged, links made).

        analyze=True refreshes the touched partitions' statistics before linking (do it every few
        thousand rows of a large merge, or the link searches stop using the HNSW index).
        """
        moved, merged = store.merge_fresh_vectors(session, limit=limit)
        if analyze and merged:
            store.analyze_vectors(session, merged)
        return moved, self.settle(session, merged)

    def add(
        self, session: Session, user_id: str, item: MemoryCreate, *, follows: uuid.UUID | None = None
    ) -> tuple[dict[str, Any], bool]:
        """Store one memory now; returns (memory, deduplicated). `follows`: the tenant's memory this one comes
        after in a sequence (linked by a `next` waypoint)."""
        self.validate_item(item)
        if follows is not None and store.get_memory(session, user_id, follows) is None:
            raise NotFound(f"memory {follows} (follows) is not a memory of user_id {user_id!r}")
        contexts = self.stored_contexts(session, user_id, [follows], inclusive=True) if follows else None
        prepared, calls = self.prepare([item], user_id, contexts=contexts)
        for call in calls:
            job_store.log_embedding(session, call, purpose="add")
        (ref,) = self.store(session, prepared, settle=True)
        if follows is not None:
            store.link_in_order(session, user_id, [follows, ref.id])
        memory = store.get_memory(session, user_id, ref.id)
        assert memory is not None
        return memory, not ref.created

    def update(self, session: Session, user_id: str, memory_id: uuid.UUID, patch: dict[str, Any]) -> dict[str, Any]:
        """Change content (re-classified, re-embedded), tags, metadata, status or occurred_at; BM25 statistics
        follow the change."""
        current = store.get_memory(session, user_id, memory_id)
        if current is None:
            raise NotFound(f"memory {memory_id} not found")
        content, tags, metadata = patch.get("content"), patch.get("tags"), patch.get("metadata")
        self._check_tags_and_metadata(tags or [], metadata or {}, "update")
        prepared = None
        if content is not None and normalize_content(content) != normalize_content(current["content"]):
            self._check_content(content, "content")
            item = MemoryCreate(content=content, tags=current["tags"], metadata=current["metadata"])
            contexts = self.stored_contexts(session, user_id, [memory_id])
            (prepared,), calls = self.prepare([item], user_id, contexts=contexts)
            for call in calls:
                job_store.log_embedding(session, call, purpose="update")
            guard_store_model(session, self.embedders)
            owner = store.content_hash_owner(session, user_id, prepared.content_hash)
            if owner is not None and owner != memory_id:
                raise Conflict(f"another memory ({owner}) already has this content", details={"id": str(owner)})
        # Tags are part of the searchable text too: take the memory out of the statistics, change it, put it back.
        was_counted = store.settled_ids(session, [memory_id])
        store.count_terms(session, was_counted, sign=-1)
        if prepared is not None:
            store.replace_content(session, user_id, memory_id, prepared)
        status, occurred_at = patch.get("status"), patch.get("occurred_at")
        if tags is not None or metadata is not None or status is not None or occurred_at is not None:
            store.update_memory_fields(
                session, user_id, memory_id, tags=tags, meta=metadata, status=status, occurred_at=occurred_at
            )
        if prepared is not None or was_counted:  # new content is indexed at once; a fresh memory waits its merge
            store.count_terms(session, [memory_id], sign=1)
        if prepared is not None:
            self._reembed_followers(session, user_id, memory_id)
        updated = store.get_memory(session, user_id, memory_id)
        assert updated is not None
        return updated

    def _reembed_followers(self, session: Session, user_id: str, memory_id: uuid.UUID) -> int:
        """The turns after an edited memory were embedded after its old text: embed them again after the new
        one. Full-width ones only (a compressed one gets its context when it regenerates); returns how many."""
        followers = store.full_width_followers(session, user_id, memory_id, turns=self.settings.embed_context_turns)
        if not followers:
            return 0
        ids = [f.id for f in followers]
        vectors, calls = self.embed_by_sector(
            [normalize_content(f.content) for f in followers],
            [f.sectors for f in followers],
            self.stored_contexts(session, user_id, ids),
        )
        for call in calls:
            job_store.log_embedding(session, call, purpose="update")
        indexed = set(store.settled_ids(session, ids))  # a memory waiting for its merge stays in the fresh tier
        store.swap_vectors(session, [(i, user_id, v, i in indexed) for i, v in zip(ids, vectors, strict=True)])
        return len(ids)

    def delete(self, session: Session, user_id: str, memory_id: uuid.UUID) -> bool:
        """Delete a memory (vectors and waypoints cascade) and take it out of the BM25 statistics."""
        if store.get_memory(session, user_id, memory_id) is None:
            return False
        store.count_terms(session, store.settled_ids(session, [memory_id]), sign=-1)
        return store.delete_memory(session, user_id, memory_id)

    def store_chunk(self, session: Session, job_id: uuid.UUID, seq: int) -> str | None:
        """Process one chunk of a batch or ingest job exactly once; returns the job status, or None if nothing to do.

        Items made from a document become memories placed in it (document_id, chunk_index); the chunk that
        completes an ingest job finishes its document in the same transaction (reading-order links, done).
        """
        chunk = job_store.claim_chunk(session, job_id, seq)
        if chunk is None:
            return None
        job = job_store.get_job(session, job_id)
        assert job is not None
        items, classified, placements, positions, contexts = [], [], [], [], []
        for raw in chunk["items"]:
            known = raw.pop(CLASSIFICATION_KEY, None)
            positions.append(raw.pop(SEQUENCE_KEY, None))
            contexts.append(raw.pop(CONTEXT_KEY, ""))
            placements.append(documents.placement(raw))
            items.append(MemoryCreate.model_validate(raw))
            classified.append((tuple(known["sectors"]), float(known["confidence"])) if known else None)
        started = time.perf_counter()
        prepared, calls = self.prepare(items, job["user_id"], classified, contexts)
        embedded = time.perf_counter()
        prepared = [
            dataclasses.replace(memory, document_id=place[0], chunk_index=place[1]) if place else memory
            for memory, place in zip(prepared, placements, strict=True)
        ]
        for call in calls:
            job_store.log_embedding(session, call, purpose=job["kind"], job_id=job_id)
        refs = self.store(session, prepared, settle=False)
        created = sum(1 for r in refs if r.created)
        result: dict[str, Any] = {"created": created, "duplicates": len(items) - created}
        sequence = bool(job["params"].get("sequence"))
        if sequence:  # where each item went, for the links made when the last chunk is done
            result["sequence"] = [[pos, str(ref.id), ref.created] for pos, ref in zip(positions, refs, strict=True)]
        ingest = job["kind"] == documents.INGEST_JOB_KIND
        if ingest:  # a document's stage times (summed over its chunks by chunk_totals)
            result["embed_ms"] = round((embedded - started) * 1000)
            result["store_ms"] = round((time.perf_counter() - embedded) * 1000)
        status = job_store.complete_chunk(session, job_id, seq, done=len(items), result=result, finish_job=not ingest)
        # complete_chunk holds the job row lock, so this count sees every chunk committed before ours.
        if ingest and job_store.open_chunk_count(session, job_id) == 0:
            status = documents.finish_document(session, job_id)
        elif sequence and job_store.open_chunk_count(session, job_id) == 0:
            links = store.link_in_order(session, job["user_id"], job_store.sequence_of(session, job_id))
            job_store.merge_result(session, job_id, {"next_links": links})
        return status

    def query(
        self,
        session: Session,
        user_id: str,
        query: str,
        *,
        k: int,
        filters: QueryFilters,
        options: RetrievalOptions | None = None,
        token_budget: int | None = None,
        diversity: float | None = None,
        recency_weight: float | None = None,
        now: datetime | None = None,
        side_session: Callable[[], AbstractContextManager[Session]] | None = None,
    ) -> QueryOutcome:
        """Full-text + dense candidates fused by RRF (and the memories of the period the query names, if it
        names a bounded one), waypoints, composite score, threshold gate.

        `side_session`: a factory of a second session; given one, the full-text stage runs on it beside
        embedding and the dense search (two round trips at once instead of one after the other).
        The query's model calls are returned in `embed_calls`, for the caller to log (off the request path).
        """
        s = self.settings
        options = options or RetrievalOptions()
        now = now or datetime.now(UTC)
        wanted_sectors = filters.sectors or ([filters.sector] if filters.sector else None)
        where = MemoryFilter(
            sectors=wanted_sectors,
            tags=filters.tags,
            start_time=filters.start_time,
            end_time=filters.end_time,
            occurred_after=filters.occurred_after,
            occurred_before=filters.occurred_before,
        )
        pool = k * s.candidate_multiplier
        watch = _Stopwatch()
        beside: Future[tuple[list[tuple[uuid.UUID, float]], float]] | None = None
        if options.lexical and side_session is not None and self._side is not None:
            beside = self._side.submit(self._lexical_beside, side_session, user_id, query, pool, where)
        queries: dict[str, SectorVector] = {}
        calls: list[EmbedCall] = []
        for provider, sectors_of_model in store.group_sectors(self.query_embedders):
            vectors, call = embed_query_timed(provider, [normalize_content(query)])
            if call is not None:  # a model call, not a cache hit
                calls.append(call)
            shared_query = SectorVector(provider.model, vectors[0])
            queries |= dict.fromkeys(sectors_of_model, shared_query)
        watch.lap("embed")
        lexical: list[tuple[uuid.UUID, float]] = []
        if options.lexical and beside is None:
            lexical = store.lexical_candidates(session, user_id, query, limit=pool, where=where, params=self.lexical)
            watch.lap("lexical")
        search_sectors = tuple(wanted_sectors or sector_rules.SECTORS)
        if options.classify and not wanted_sectors:  # OpenMemory: the query's own sectors, when it has any
            query_class = sector_rules.classify(query)
            if query_class.scores[query_class.primary] > 0:
                search_sectors = query_class.sectors
        dense = (
            store.dense_candidates(
                session,
                user_id,
                {sector: queries[sector] for sector in search_sectors},
                limit=pool,
                where=where,
                ladder=self.ladder,
            )
            if options.dense
            else []
        )
        dense = [(memory_id, sim) for memory_id, sim in dense if sim >= s.dense_min_similarity]
        watch.lap("dense")
        # Time anchoring: the period the query names ("in May 2023", "yesterday"), searched on its own as well.
        period = query_period(query, now) if s.period_weight > 0 and options.rank == "composite" else None
        bounds = period.bounds() if period and options.dense and s.period_scan_limit else None
        anchored: list[tuple[uuid.UUID, float]] = []
        if bounds is not None:
            anchored = store.period_candidates(
                session,
                user_id,
                {sector: queries[sector] for sector in search_sectors},
                start=bounds[0],
                end=bounds[1],
                where=where,
                limit=pool,
                scan_limit=s.period_scan_limit,
                ladder=self.ladder,
            )
            watch.lap("period")
        if beside is not None:
            lexical, lexical_ms = beside.result()
            watch.lap("lexical_wait")  # how much longer than embedding + dense search the full-text stage took
            watch.laps["lexical"] = lexical_ms
        seeds = fuse(lexical, dense, rrf_k=s.rrf_k, limit=pool)
        # What happened then, found or not; no similarity floor: the period is what selects them ("what did we
        # say yesterday?" shares little with what was said), their similarity only orders them.
        for rank, (memory_id, sim) in enumerate(anchored, start=1):
            seeds.setdefault(memory_id, Candidate(memory_id, dense_similarity=sim)).period_rank = rank
        rows, links, reading_order, contradicts = store.fetch_with_links(
            session,
            user_id,
            list(seeds),
            queries,
            known_cosine=[i for i, c in seeds.items() if c.dense_similarity is not None],
            max_hops=s.activation_max_hops if options.waypoints else 1,
            ladder=self.ladder,
        )
        watch.lap("fetch")
        max_lexical = max((score for _, score in lexical), default=0.0)

        def cosine_of(memory_id: uuid.UUID, candidate: Candidate) -> float | None:
            """The query's similarity to the memory; None when it has no vector to compare (a fingerprint)."""
            if candidate.dense_similarity is not None:
                return candidate.dense_similarity
            cosine = rows[memory_id]["cosine"] if memory_id in rows else None
            return None if cosine is None else float(cosine)

        own_relevance = functools.partial(
            relevance, max_lexical=max_lexical, fusion_alpha=s.fusion_alpha, lexical_power=s.lexical_power
        )
        if options.waypoints:  # each seed spreads its own relevance to the query
            energy = {i: own_relevance(c, cosine=cosine_of(i, c)) for i, c in seeds.items()}
            activated = spread_activation(
                seeds, links, max_hops=s.activation_max_hops, decay_per_hop=s.waypoint_hop_decay, energy=energy
            )
            candidates = seeds | activated
        else:
            candidates = dict(seeds)
        if where.active:  # linked memories must pass the same filters as direct hits
            candidates = {i: c for i, c in candidates.items() if i in rows and where.passes(rows[i])}
        cosines = {i: cosine_of(i, c) for i, c in candidates.items() if i in rows}
        if options.waypoints and s.context_weight > 0 and reading_order:  # what surrounds it in reading order
            own = {i: own_relevance(c, cosine=cosines[i]) for i, c in candidates.items() if i in cosines}
            for memory_id, (support, lender) in context_support(
                own, reading_order, max_hops=s.activation_max_hops
            ).items():
                candidates[memory_id].support, candidates[memory_id].support_from = support, lender
        if period:  # time anchoring: the memories that occurred in the period the query names
            for memory_id, candidate in candidates.items():
                row = rows.get(memory_id)
                if row is not None:
                    candidate.in_period = period.contains(store.happened_at(row).astimezone(UTC))
        recency_weight = recency_weight if recency_weight is not None else s.recency_weight
        weights = ScoreWeights(*s.score_weights) if recency_weight is None else recency_interpolated(recency_weight)
        scored = []
        for memory_id, candidate in candidates.items():
            row = rows.get(memory_id)
            if row is None:
                continue
            score_candidate(
                candidate,
                cosine=cosines.get(memory_id),
                max_lexical=max_lexical,
                salience=float(row["salience"]),
                last_seen_at=row["last_seen_at"],
                now=now,
                weights=weights,
                fusion_alpha=s.fusion_alpha,
                hop_decay=s.waypoint_hop_decay,
                recency_decay_per_day=s.recency_decay_per_day,
                status=row["status"],
                confidence=float(row["confidence"]),
                confidence_weight=s.weight_confidence,
                context_weight=s.context_weight,
                period_weight=s.period_weight,
                lexical_power=s.lexical_power,
                activation_weight=s.activation_weight,
            )
            scored.append((candidate, row))
        if contradicts and options.rank == "composite":
            strength = {  # OpenMem's effective strength: salience x confidence x recency
                c.id: float(row["salience"]) * float(row["confidence"]) * c.components.get("recency", 0.0)
                for c, row in scored
            }
            resolve_conflicts({c.id: c for c, _ in scored}, contradicts, strength, penalty=s.conflict_penalty)
        if options.rank == "fusion":  # the fused rank alone: what the rankers found, before any weighting
            for candidate, _ in scored:
                candidate.score = candidate.rrf_score
        else:
            min_score = filters.min_score if filters.min_score is not None else s.min_score
            scored = [pair for pair in scored if pair[0].score >= min_score]
        scored.sort(key=lambda pair: (-pair[0].score, str(pair[0].id)))
        if diversity is not None and len(scored) > 1:  # MMR re-orders what passed the gate
            by_id = {c.id: (c, row) for c, row in scored}
            best = max(c.score for c, _ in scored) or 1.0
            memory_vectors = comparable(store.primary_vectors(session, list(by_id), queries), self.ladder)
            order = mmr_order(
                [c.id for c, _ in scored], {c.id: c.score / best for c, _ in scored}, memory_vectors, lambda_=diversity
            )
            for memory_id, redundancy in order:
                by_id[memory_id][0].components["redundancy"] = round(redundancy, 6)
            scored = [by_id[memory_id] for memory_id, _ in order]
            watch.lap("mmr")
        watch.lap("score")
        packing = None
        if token_budget is None:
            top = scored[:k]
            self._hydrate(session, user_id, [row for _, row in top])
        else:  # the best that fit the budget, at most k (membox's greedy knapsack)
            self._hydrate(session, user_id, [row for _, row in scored])
            packing = pack([row["content"] for _, row in scored], budget=token_budget, limit=k)
            top = [scored[i] for i in packing.chosen]
        top = [(c, row) for c, row in top if "content" in row]  # deleted between the two reads
        traversed = [step for c, _ in top for step in c.traversed]
        watch.lap("payload")
        watch.total()
        return QueryOutcome(
            matches=top,
            candidates=len(candidates),
            reinforce_ids=[c.id for c, _ in top],
            traversed=traversed,
            timings_ms=watch.laps,
            packing=packing,
            query_sectors=search_sectors,
            embed_calls=calls,
        )

    def _lexical_beside(
        self,
        side_session: Callable[[], AbstractContextManager[Session]],
        user_id: str,
        query: str,
        limit: int,
        where: MemoryFilter,
    ) -> tuple[list[tuple[uuid.UUID, float]], float]:
        """The full-text stage on a session of its own (a thread of `_side`); its candidates and milliseconds."""
        started = time.perf_counter()
        with side_session() as session:
            found = store.lexical_candidates(session, user_id, query, limit=limit, where=where, params=self.lexical)
        return found, round((time.perf_counter() - started) * 1000, 3)

    def log_query_calls(self, session: Session, calls: Sequence[EmbedCall]) -> None:
        """Record queries' model calls in embed_logs (the gateway does it after answering, several at once)."""
        job_store.log_embeddings(session, calls, purpose="query", synchronous=False)

    def _hydrate(self, session: Session, user_id: str, rows: Sequence[dict[str, Any]]) -> None:
        """Fill in the payload of lean rows: hot-tier ones from the cache, the rest in one query (then cached)."""
        cached = self.row_cache.get(rows) if self.row_cache else {}
        missing = [row["id"] for row in rows if row["id"] not in cached]
        fetched = store.fetch_payloads(session, user_id, missing)
        for row in rows:
            payload = cached.get(row["id"]) or fetched.get(row["id"])
            if payload is not None:
                row.update((name, payload.get(name)) for name in PAYLOAD_FIELDS)
        if self.row_cache and fetched:
            self.row_cache.put([row for row in rows if row["id"] in fetched])

    def reinforce_hits(
        self,
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
            store.reinforce(
                session, user_id, memory_ids, boost=self.settings.query_reinforce_boost, count_coactivation=True
            )
            # A traversed link may be stored in either direction.
            pairs = list(traversed) + [(dst, src) for src, dst in traversed]
            store.strengthen_waypoints(
                session,
                user_id,
                pairs,
                step=self.settings.waypoint_reinforce_step,
                cap=self.settings.waypoint_max_weight,
            )
        return True

    def regenerate(
        self, session: Session, user_id: str, memory_ids: Sequence[uuid.UUID], *, boost: float
    ) -> list[uuid.UUID]:
        """Decay seed, "Regeneration on Access": re-embed compressed or fingerprinted memories from their original
        content at full dimension, restore them to warm, boost salience. Returns the regenerated ids."""
        decayed = store.lock_decayed(session, user_id, memory_ids)
        if not decayed:
            return []
        guard_store_model(session, self.embedders)
        embedded, calls = self.embed_by_sector(
            [normalize_content(m.content) for m in decayed],
            [m.sectors for m in decayed],
            self.stored_contexts(session, user_id, [m.id for m in decayed]),
        )
        for call in calls:
            job_store.log_embedding(session, call, purpose="regenerate")
        store.restore_vectors(session, user_id, dict(zip([m.id for m in decayed], embedded, strict=True)), boost=boost)
        for memory in decayed:
            log.info("[decay] regenerated memory %s", memory.id)
        return [m.id for m in decayed]


def comparable(
    vectors: dict[uuid.UUID, np.ndarray], ladder: Callable[[int], Sequence[int]]
) -> dict[uuid.UUID, np.ndarray]:
    """Vectors of mixed rungs (some memories compressed) pooled to the smallest rung among them, so they can be
    compared; fingerprints (not embeddings) are left out."""
    if len({v.shape[0] for v in vectors.values()}) <= 1:
        return vectors
    full = max(v.shape[0] for v in vectors.values())
    rungs = set(ladder(full))
    usable = {i: v for i, v in vectors.items() if v.shape[0] in rungs}
    smallest = min((v.shape[0] for v in usable.values()), default=full)
    return {i: v if v.shape[0] == smallest else pool_to(v, smallest) for i, v in usable.items()}
