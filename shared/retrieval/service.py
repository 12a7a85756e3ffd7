"""The read path as one service: a query's four stages in order, each a module of its own.

    candidates   candidates.py  full text + vectors (+ the period the query names), fused by RRF   -> Found
    expand       expand.py      rows and waypoints: spreading activation, context support, time    -> Expanded
    score        columns.py     OpenMemory's composite score (scoring.py's formulas), conflicts   -> scored
    select       select.py      the gate, MMR, the token budget, the payload of what is returned   -> Selection

Functions take an open session and never commit; the gateway answers queries on an autocommit session.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from shared.api.query import QueryRequest, RetrievalOptions
from shared.config import Settings
from shared.embedding import EmbeddingProvider
from shared.embedding.calls import EmbedCall
from shared.errors import InvalidInput
from shared.retrieval.candidates import CandidateSearch, SessionFactory
from shared.retrieval.columns import score_all
from shared.retrieval.evidence import GateParams
from shared.retrieval.expand import expand
from shared.retrieval.fusion import Candidate
from shared.retrieval.hot_rows import HotRowCache
from shared.retrieval.packing import Packing
from shared.retrieval.scoring import ScoringParams
from shared.retrieval.select import Selector, weigh_evidence
from shared.retrieval.versions import asks_about_the_past
from shared.storage.rows import MemoryFilter


@dataclass(frozen=True)
class Ask:
    """One query as the stages see it: the request resolved against the settings."""

    user_id: str
    text: str
    k: int
    pool: int  # candidates each ranker returns (k x candidate_multiplier)
    where: MemoryFilter
    wanted_sectors: tuple[str, ...] | None  # the filter's sectors, which are also the ones searched
    options: RetrievalOptions
    min_score: float
    gate: GateParams  # min_evidence as the request sets it (0: off)
    explain: bool  # the trace is wanted: evidence is weighed even with the gate off
    token_budget: int | None
    diversity: float | None
    scoring: ScoringParams
    now: datetime
    past: bool = False  # the question asks what a fact was before it changed: the older version answers

    @property
    def weighs_evidence(self) -> bool:
        """Evidence is weighed when the gate is on, or the trace is wanted; never for the fused rank (no gate)."""
        return (self.gate.min_evidence > 0 or self.explain) and self.options.rank == "composite"


@dataclass
class QueryOutcome:
    """The ranked matches and what should be reinforced afterwards (off the request path)."""

    matches: list[tuple[Candidate, dict]]
    candidates: int
    reinforce_ids: list[uuid.UUID] = field(default_factory=list)
    traversed: list[tuple[uuid.UUID, uuid.UUID]] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)
    packing: Packing | None = None  # when the query set a token budget
    query_sectors: tuple[str, ...] = ()  # the sectors whose vectors were searched
    embed_calls: list[EmbedCall] = field(default_factory=list)  # model calls made for the query (not cache hits)
    evidence: float | None = None  # the best candidate's, when the evidence gate weighed any
    unknown_names: tuple[str, ...] = ()  # the query's names no memory of the tenant has (the gate on)


class Stopwatch:
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


class Retriever:
    """Stateless apart from its settings, query embedders and caches; one per process."""

    def __init__(
        self,
        settings: Settings,
        query_embedders: Mapping[str, EmbeddingProvider] | EmbeddingProvider,
        *,
        row_cache: HotRowCache | None = None,
    ) -> None:
        self.params = settings.retrieval
        self.scoring = settings.scoring
        ladder = settings.compression.ladder  # the rungs a model's vectors compress to (decay)
        self.candidates = CandidateSearch(query_embedders, lexical=settings.lexical, params=self.params, ladder=ladder)
        self.selector = Selector(ladder, row_cache)

    def ask(self, user_id: str, request: QueryRequest, now: datetime | None = None) -> Ask:
        """The request resolved: k (default and maximum), filters, the gate, the scoring for its recency weight."""
        k = request.k or self.params.default_k
        if k > self.params.max_k:
            raise InvalidInput(f"k={k} is above the maximum of {self.params.max_k}")
        filters = request.filters
        wanted = filters.sectors or ([filters.sector] if filters.sector else None)
        return Ask(
            user_id=user_id,
            text=request.query,
            k=k,
            pool=k * self.params.candidate_multiplier,
            where=MemoryFilter(
                sectors=wanted,
                tags=filters.tags,
                start_time=filters.start_time,
                end_time=filters.end_time,
                occurred_after=filters.occurred_after,
                occurred_before=filters.occurred_before,
                as_of=filters.as_of,
            ),
            wanted_sectors=tuple(wanted) if wanted else None,
            options=request.retrieval,
            min_score=filters.min_score if filters.min_score is not None else self.params.min_score,
            gate=self.params.gate
            if filters.min_evidence is None
            else replace(self.params.gate, min_evidence=filters.min_evidence),
            explain=request.explain,
            token_budget=request.token_budget,
            diversity=request.diversity,
            scoring=self.scoring.for_request(request.recency_weight),
            now=now or datetime.now(UTC),
            past=request.retrieval.waypoints and asks_about_the_past(request.query),
        )

    def query(
        self,
        session: Session,
        user_id: str,
        request: QueryRequest,
        *,
        now: datetime | None = None,
        side_session: SessionFactory | None = None,
    ) -> QueryOutcome:
        """The memories that matter for `request`, best first, each with its trace.

        `side_session`: a factory of a second session; given one, the full-text stage runs on it beside
        embedding and the dense search (two round trips at once instead of one after the other). The query's
        model calls are returned in `embed_calls`, for the caller to log (off the request path).
        """
        ask = self.ask(user_id, request, now)
        watch = Stopwatch()
        found = self.candidates.find(session, ask, watch, side_session)
        expanded = expand(ask, found, max_hops=self.params.max_hops)
        scored = score_all(
            expanded.candidates,
            expanded.rows,
            expanded.cosines,
            expanded.contradicts,
            max_lexical=found.max_lexical,
            now=ask.now,
            params=ask.scoring,
            fusion_only=ask.options.rank == "fusion",
        )
        if found.terms is not None:
            weigh_evidence(expanded.candidates, expanded.rows, expanded.cosines, found.terms, ask.gate)
        selection = self.selector.select(session, ask, scored, found.queries, watch, supersedes=expanded.supersedes)
        watch.total()
        return QueryOutcome(
            matches=selection.matches,
            candidates=len(expanded.candidates),
            reinforce_ids=[c.id for c, _ in selection.matches],
            traversed=[step for c, _ in selection.matches for step in c.traversed],
            timings_ms=watch.laps,
            packing=selection.packing,
            query_sectors=found.sectors,
            embed_calls=found.calls,
            evidence=selection.evidence,
            unknown_names=found.terms.unknown_names if found.terms else (),
        )
