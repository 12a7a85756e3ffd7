"""Stage 1 of the read path: the query's candidates.

The query is embedded once per model; full text (BM25 with the tenant's statistics) and the vector search
(each searched sector's HNSW index, and the fresh tier exactly) each return k x 4 candidates, fused by RRF; when
the query names a bounded period ("in May 2023", "yesterday"), the memories of that period are searched on their
own too. All of it is one statement (`storage.candidates`); what that statement needs first (the query terms'
statistics) may be read on a second connection while the query is embedded.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session

from shared.embedding import EmbeddingProvider
from shared.embedding.calls import EmbedCall, embed_query_timed
from shared.memory import sectors as sector_rules
from shared.memory.sectors import group_sectors
from shared.retrieval.evidence import QueryTerms, names_in, query_terms, without_time
from shared.retrieval.fusion import Candidate
from shared.retrieval.lexical import LexicalParams
from shared.retrieval.params import RetrievalParams
from shared.retrieval.temporal import Period, query_period
from shared.storage import bm25, search
from shared.storage.candidates import Prelude, fused_with_links, prelude
from shared.storage.neighbours import FetchedLinks
from shared.storage.rows import SectorVector
from shared.storage.sector_models import per_sector
from shared.text import normalize_content

if TYPE_CHECKING:
    from shared.retrieval.service import Ask, Stopwatch

SessionFactory = Callable[[], AbstractContextManager[Session]]


@dataclass
class Found:
    """What stage 1 found: the hits (fused, with the period's), and what later stages need of the query."""

    hits: dict[uuid.UUID, Candidate]
    queries: dict[str, SectorVector]  # the query as each sector's model embeds it
    sectors: tuple[str, ...]  # the sectors whose vectors were searched
    max_lexical: float  # the best BM25 score: lexical strength is relative to it
    period: Period | None  # the period the query names, if time anchoring is on
    fetched: FetchedLinks  # the hits' rows and links, read with the candidates (each with its `query_terms`)
    terms: QueryTerms | None = None  # the query's terms in the tenant, for the evidence gate (None: gate off)
    calls: list[EmbedCall] = field(default_factory=list)  # model calls made (not cache hits)


class CandidateSearch:
    """Stage 1, configured once per process."""

    def __init__(
        self,
        query_embedders: Mapping[str, EmbeddingProvider] | EmbeddingProvider,
        *,
        lexical: LexicalParams,
        params: RetrievalParams,
        ladder: Callable[[int], Sequence[int]],
    ) -> None:
        self.query_embedders = per_sector(query_embedders)
        self.lexical = lexical
        self.params = params
        self.ladder = ladder
        # Threads for the full-text stage of queries given a second session (created when first needed).
        self._side = (
            ThreadPoolExecutor(params.parallel_threads, thread_name_prefix="mnemoflow-lexical")
            if params.parallel_threads
            else None
        )

    def find(self, session: Session, ask: Ask, watch: Stopwatch, side_session: SessionFactory | None) -> Found:
        """The query's hits, read in one statement with their rows and links (`storage.candidates`). What that
        statement needs first (the query terms' statistics, which compressed rungs the tenant has) is read on the
        second session while the query is embedded, else after."""
        options, p = ask.options, self.params
        # Time anchoring: the period the query names ("in May 2023", "yesterday"), searched on its own as well.
        anchored = ask.scoring.period_weight > 0 and options.rank == "composite"
        period = query_period(ask.text, ask.now) if anchored else None
        sectors = self.sectors_to_search(ask)
        dims = sorted(
            {
                d
                for provider, _ in group_sectors({s: self.query_embedders[s] for s in sectors})
                for d in self.ladder(provider.dim)[1:]
            }
            if options.dense
            else ()
        )
        beside: Future[tuple[Prelude, float]] | None = None
        gated = ask.weighs_evidence
        if side_session is not None and self._side is not None and (options.lexical or gated or dims):
            beside = self._side.submit(self._prelude_beside, side_session, ask, dims)
        queries, calls = self.embed(ask.text, ask.user_id)
        watch.lap("embed")
        # The stage names are the ones the stages had apart: `lexical` is now the full-text stage's first part
        # (the terms' statistics, and the compressed rungs' probe), `dense` the one statement, `fetch` the reading
        # of its rows.
        if beside is not None:
            first, prelude_ms = beside.result()
            watch.lap("lexical_wait")
            watch.laps["lexical"] = prelude_ms
        else:
            first = self._prelude(session, ask, dims)
            watch.lap("lexical")
        terms, present = first.terms, first.present
        asked = self._query_terms(first, named_period=bool(period)) if gated else None
        searched = {sector: queries[sector] for sector in sectors} if options.dense else {}
        rungs = search.smaller_rungs(searched, self.ladder) if searched else []
        if rungs != dims:  # a model whose vectors are not `dim` long: probed again, for the rungs they have
            present = search.compressed_rungs(session, ask.user_id, rungs) if rungs else set()
        lexical = (
            bm25.lexical_plan(terms, ask.user_id, limit=ask.pool, where=ask.where, params=self.lexical)
            if options.lexical and terms
            else None
        )
        # No similarity floor for what the period's search finds: the period is what selects them ("what did we say
        # yesterday?" shares little with what was said), their similarity only orders them.
        bounds = period.bounds() if period and searched and p.period_scan_limit else None
        period_search = (
            search.period_plan(
                searched,
                start=bounds[0],
                end=bounds[1],
                where=ask.where,
                limit=ask.pool,
                scan_limit=p.period_scan_limit,
                ladder=self.ladder,
            )
            if bounds is not None and bounds[0] < bounds[1]
            else None
        )
        found = fused_with_links(
            session,
            ask.user_id,
            queries,
            searched,
            lexical,
            limit=ask.pool,
            where=ask.where,
            present=present,
            dense_min_similarity=p.dense_min_similarity,
            rrf_k=p.rrf_k,
            max_hops=p.max_hops if options.waypoints else 1,
            fanout=p.hop_fanout,
            ladder=self.ladder,
            period=period_search,
            on_read=lambda: watch.lap("dense"),
            query_lexemes=asked.lexemes if asked else (),
        )
        hits = {h["id"]: Candidate(**h) for h in found.hits}
        watch.lap("fetch")
        return Found(hits, queries, sectors, found.max_lexical, period, found.fetched, asked, calls)

    @staticmethod
    def _query_terms(first: Prelude, *, named_period: bool) -> QueryTerms:
        """The evidence gate's view of the query; a query naming a period has its time words answered by dates."""
        documents = int(first.terms[0].documents or 0) if first.terms else 0
        df = {r.lexeme: int(r.df) for r in first.terms}
        return query_terms(without_time(df) if named_period else df, documents, first.names)

    def _prelude(self, session: Session, ask: Ask, dims: Sequence[int]) -> Prelude:
        """The query terms' statistics (full text or the evidence gate on), its names' (the gate on) and the
        compressed rungs among `dims` the tenant has, in one round trip."""
        gated = ask.weighs_evidence
        text = ask.text if ask.options.lexical or gated else None
        names = names_in(ask.text) if gated else ()
        return prelude(session, ask.user_id, text, self.lexical.config, dims, names)

    def _prelude_beside(self, side_session: SessionFactory, ask: Ask, dims: Sequence[int]) -> tuple[Prelude, float]:
        started = time.perf_counter()
        with side_session() as session:
            first = self._prelude(session, ask, dims)
        return first, round((time.perf_counter() - started) * 1000, 3)

    def embed(self, text: str, tenant: str) -> tuple[dict[str, SectorVector], list[EmbedCall]]:
        """The query embedded by each sector's model (once per model; the tenant's cache entry may answer instead)."""
        queries: dict[str, SectorVector] = {}
        calls: list[EmbedCall] = []
        for provider, sectors_of_model in group_sectors(self.query_embedders):
            vectors, call = embed_query_timed(provider, [normalize_content(text)], tenant=tenant)
            if call is not None:  # a model call, not a cache hit
                calls.append(call)
            shared_query = SectorVector(provider.model, vectors[0])
            queries |= dict.fromkeys(sectors_of_model, shared_query)
        return queries, calls

    @staticmethod
    def sectors_to_search(ask: Ask) -> tuple[str, ...]:
        """The filter's sectors; else, with `classify`, the query's own sectors (OpenMemory); else all five."""
        if ask.wanted_sectors:
            return tuple(ask.wanted_sectors)
        if ask.options.classify:
            query_class = sector_rules.classify(ask.text)
            if query_class.scores[query_class.primary] > 0:
                return query_class.sectors
        return tuple(sector_rules.SECTORS)
