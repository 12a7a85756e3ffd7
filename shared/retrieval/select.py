"""Stage 4 of the read path: what is returned. The gates (relevance per memory, evidence per query), MMR for
diversity, versions of a fact in answering order, the token budget, the payload (content, metadata) of the memories
kept (the hot tier's from the Redis cache, the rest in one query), and near copies below the other matches."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from shared.retrieval.copies import copies_last
from shared.retrieval.evidence import GateParams, QueryTerms, coverage, evidence
from shared.retrieval.fusion import Candidate
from shared.retrieval.hot_rows import PAYLOAD_FIELDS, HotRowCache
from shared.retrieval.mmr import comparable, mmr_order
from shared.retrieval.packing import Packing, pack
from shared.retrieval.versions import answering_order
from shared.storage import selected
from shared.storage.rows import SectorVector

if TYPE_CHECKING:
    from shared.retrieval.service import Ask, Stopwatch

Match = tuple[Candidate, dict[str, Any]]


@dataclass
class Selection:
    matches: list[Match]  # best first, each with its row (payload included)
    packing: Packing | None  # when the query set a token budget
    evidence: float | None = None  # the best candidate's (the evidence gate on, some candidate relevant)


class Selector:
    """Stage 4, configured once per process."""

    def __init__(self, ladder: Callable[[int], Sequence[int]], row_cache: HotRowCache | None = None) -> None:
        self.ladder = ladder
        self.row_cache = row_cache  # hot-tier payloads (the gateway's); without it the payload is one more query

    def select(
        self,
        session: Session,
        ask: Ask,
        scored: Sequence[Match],
        queries: Mapping[str, SectorVector],
        watch: Stopwatch,
        *,
        supersedes: Sequence[tuple[uuid.UUID, uuid.UUID]] = (),
    ) -> Selection:
        """Candidates weighed by `weigh_evidence` (the evidence gate on, or a trace wanted) are gated by it too."""
        ranked = list(scored)
        best = None
        if ask.options.rank == "composite":  # the gate reads relevance alone; the fused rank has no gate
            ranked = [pair for pair in ranked if pair[0].relevance >= ask.min_score]
            weighed = [c.evidence for c, _ in ranked if c.evidence is not None]
            if weighed:  # and a query with too little evidence gets nothing
                best = max(weighed)
                if ask.gate.min_evidence > 0 and best < ask.gate.min_evidence:
                    ranked = []
        ranked.sort(key=lambda pair: (-pair[0].score, str(pair[0].id)))
        if ask.diversity is not None and len(ranked) > 1:  # MMR re-orders what passed the gate
            ranked = self._diversify(session, ranked, queries, ask.diversity)
            watch.lap("mmr")
        if supersedes:  # superseded memories kept: each version pair in answering order
            ranked = in_answering_order(ranked, supersedes, past=ask.past)
        watch.lap("score")
        packing = None
        if ask.token_budget is None:
            top = ranked[: ask.k]
            self._hydrate(session, ask.user_id, [row for _, row in top])
        else:  # the best that fit the budget, at most k (membox's greedy knapsack)
            self._hydrate(session, ask.user_id, [row for _, row in ranked])
            packing = pack([row["content"] for _, row in ranked], budget=ask.token_budget, limit=ask.k)
            top = [ranked[i] for i in packing.chosen]
        top = [(c, row) for c, row in top if "content" in row]  # deleted between the two reads
        if ask.diversity != 1.0 and len(top) > 1:  # near copies below the other matches (diversity 1: off)
            top = copies_below(top)
        watch.lap("payload")
        return Selection(top, packing, best)

    def _diversify(
        self, session: Session, ranked: list[Match], queries: Mapping[str, SectorVector], diversity: float
    ) -> list[Match]:
        by_id = {c.id: (c, row) for c, row in ranked}
        best = max(c.score for c, _ in ranked) or 1.0
        vectors = comparable(selected.primary_vectors(session, list(by_id), queries), self.ladder)
        order = mmr_order(
            [c.id for c, _ in ranked], {c.id: c.score / best for c, _ in ranked}, vectors, lambda_=diversity
        )
        for memory_id, redundancy in order:
            by_id[memory_id][0].components["redundancy"] = round(redundancy, 6)
        return [by_id[memory_id] for memory_id, _ in order]

    def _hydrate(self, session: Session, user_id: str, rows: Sequence[dict[str, Any]]) -> None:
        """Fill in the payload of lean rows: hot-tier ones from the cache, the rest in one query (then cached). Rows
        read with their payload already (`storage.candidates`) are left as they are."""
        rows = [row for row in rows if "content" not in row]
        if not rows:
            return
        cached = self.row_cache.get(rows) if self.row_cache else {}
        missing = [row["id"] for row in rows if row["id"] not in cached]
        fetched = selected.fetch_payloads(session, user_id, missing)
        for row in rows:
            payload = cached.get(row["id"]) or fetched.get(row["id"])
            if payload is not None:
                row.update((name, payload.get(name)) for name in PAYLOAD_FIELDS)
        if self.row_cache and fetched:
            self.row_cache.put([row for row in rows if row["id"] in fetched])


def in_answering_order(
    ranked: list[Match], supersedes: Sequence[tuple[uuid.UUID, uuid.UUID]], *, past: bool
) -> list[Match]:
    """`ranked` with each version pair in answering order (`versions.answering_order`): a memory that moves up into
    the place of the other version takes that one's score, so the scores still read best first."""
    by_id = {c.id: (c, row) for c, row in ranked}
    order, took = answering_order([c.id for c, _ in ranked], supersedes, past=past)
    for answer, place in took.items():
        by_id[answer][0].score = max(by_id[answer][0].score, by_id[place][0].score)
    return [by_id[memory_id] for memory_id in order]


def copies_below(top: list[Match]) -> list[Match]:
    """`top` with each near copy of a memory above it (`copies.copies_last`) moved below the others, its score
    lowered to that of the last memory above it, and `copy_of` set."""
    by_id = {c.id: (c, row) for c, row in top}
    order, copy_of = copies_last([(c.id, row["content"]) for c, row in top])
    if not copy_of:
        return top
    floor = min(by_id[memory_id][0].score for memory_id in order if memory_id not in copy_of)
    for copy, original in copy_of.items():
        candidate = by_id[copy][0]
        candidate.copy_of, candidate.score = original, min(candidate.score, floor)
    return [by_id[memory_id] for memory_id in order]


def weigh_evidence(
    candidates: Mapping[uuid.UUID, Candidate],
    rows: Mapping[uuid.UUID, Mapping[str, Any]],
    cosines: Mapping[uuid.UUID, float | None],
    terms: QueryTerms,
    params: GateParams,
) -> None:
    """Each candidate's evidence (`evidence.py`), stored on it, and its parts in its trace's components (why the gate
    let the query through). A newer version has the evidence of the older ones it answers for or inherits from
    (`expand`) too: a question is usually worded as the first statement was."""
    total = sum(terms.idf.values())
    covered = {i: coverage(terms, row.get("query_terms") or (), total) for i, row in rows.items()}
    own = {i: evidence(cosines.get(i), share, terms.unknown_share, params) for i, share in covered.items()}
    unknown = round(terms.unknown_share, 6)
    for memory_id, candidate in candidates.items():
        if memory_id in rows:
            mine = own[memory_id]
            if candidate.answers_for or candidate.inherited_from is not None:
                older = {*candidate.answers_for, *filter(None, [candidate.inherited_from])} & rows.keys()
                mine = max([mine, *(own[o] for o in older)])
            candidate.evidence = mine
            candidate.note("coverage", round(covered[memory_id], 6))
            if unknown:
                candidate.note("unknown_names", unknown)
            candidate.note("evidence", round(mine, 6))
