"""Stage 2 of the read path: the hits' rows and their waypoints, and what the links and time add to them.

The candidates' one statement (`storage.candidates`) read the hits, the memories up to two association or
reading-order links away, each with the query's cosine to it, and the links among them. Then, in Python:
spreading activation from the hits (OpenMem), the filters applied to what the links reached, context support
along reading order, time anchoring (which candidates occurred in the period the query names), and versions: a
memory that supersedes a candidate answers with the larger of its own match and the older one's (`inherited`), so a
question worded as the first statement was still finds the fact as it is now. A superseded memory lends nothing to
its neighbours (activation, context) but to its successor, and by default is not a candidate at all: its successor
answers for it (`answer_by_latest`).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from shared.retrieval.candidates import Found
from shared.retrieval.fusion import Candidate
from shared.retrieval.graph import context_support, spread_activation
from shared.retrieval.scoring import relevance
from shared.storage.rows import happened_at

if TYPE_CHECKING:
    from shared.retrieval.service import Ask


@dataclass
class Expanded:
    """The candidates (hits and what their links reached, filtered) with their lean rows."""

    candidates: dict[uuid.UUID, Candidate]
    rows: dict[uuid.UUID, dict[str, Any]]
    cosines: dict[uuid.UUID, float | None]  # None: no vector to compare with the query (a fingerprint)
    contradicts: list[tuple[uuid.UUID, uuid.UUID]]
    supersedes: list[tuple[uuid.UUID, uuid.UUID]]  # (newer, older), both candidates: select orders each pair
    retired: frozenset[uuid.UUID]  # the candidates superseded (at the query's `as_of`, if it has one)


def expand(ask: Ask, found: Found, *, max_hops: int) -> Expanded:
    hits, options, scoring = found.hits, ask.options, ask.scoring
    rows, links, reading_order, contradicts, supersedes = found.fetched

    def cosine_of(memory_id: uuid.UUID, candidate: Candidate) -> float | None:
        """The query's similarity to the memory; None when it has no vector to compare (a fingerprint)."""
        if candidate.dense_similarity is not None:
            return candidate.dense_similarity
        cosine = rows[memory_id]["cosine"] if memory_id in rows else None
        return None if cosine is None else float(cosine)

    own_relevance = functools.partial(
        relevance,
        max_lexical=found.max_lexical,
        fusion_alpha=scoring.fusion_alpha,
        lexical_power=scoring.lexical_power,
    )
    retired = retired_among(rows, ask.where.as_of)
    successors: dict[uuid.UUID, set[uuid.UUID]] = {i: set() for i in retired}
    for newer, older in supersedes:
        if older in successors:
            successors[older].add(newer)
    if options.waypoints:  # each hit spreads its own relevance to the query; a superseded one only to its successors
        energy = {i: own_relevance(c, cosine=cosine_of(i, c)) for i, c in hits.items()}
        activated = spread_activation(
            hits, links, max_hops=max_hops, decay_per_hop=scoring.hop_decay, energy=energy, silent=successors
        )
        candidates = hits | activated
    else:
        candidates = dict(hits)
    if options.waypoints and supersedes:
        inherit(candidates, supersedes, rows, lambda i, c: own_relevance(c, cosine=cosine_of(i, c)))
    # every candidate's cosine, the hidden and filtered ones' too: the evidence gate weighs a latest version by the
    # versions it answers for or inherits from
    cosines = {i: cosine_of(i, c) for i, c in candidates.items() if i in rows}
    if ask.where.active:  # linked memories must pass the same filters as direct hits
        candidates = {i: c for i, c in candidates.items() if i in rows and ask.where.passes(rows[i])}
    # with waypoints off, versions are ignored like every other link: nothing answers for a superseded memory, so it
    # stays (the status penalty halves it)
    shown = options.include_superseded or ask.past or not options.waypoints
    pairs = answer_by_latest(candidates, supersedes, successors, rows, keep=shown) if options.waypoints else []
    if not shown:
        candidates = {i: c for i, c in candidates.items() if i not in retired}
    if options.waypoints and scoring.context_weight > 0 and reading_order:  # what surrounds it in reading order
        own = {  # a superseded memory lends no context (it still has its own)
            i: 0.0 if i in retired else own_relevance(c, cosine=cosines[i])
            for i, c in candidates.items()
            if i in cosines
        }
        for memory_id, (support, lender) in context_support(own, reading_order, max_hops=max_hops).items():
            candidates[memory_id].support, candidates[memory_id].support_from = support, lender
    if found.period:  # time anchoring: the memories that occurred in the period the query names
        for memory_id, candidate in candidates.items():
            row = rows.get(memory_id)
            if row is not None:
                candidate.in_period = found.period.contains(happened_at(row).astimezone(UTC))
    return Expanded(candidates, rows, cosines, contradicts, pairs, frozenset(retired & candidates.keys()))


def retired_among(rows: dict[uuid.UUID, dict[str, Any]], as_of: datetime | None) -> set[uuid.UUID]:
    """The memories superseded: all whose status says so; at an `as_of`, only those replaced by then (the rows of the
    others, current then, are given the status they had: active)."""
    retired = set()
    for memory_id, row in rows.items():
        if row["status"] != "superseded":
            continue
        valid_to = row.get("valid_to")
        if as_of is not None and (valid_to is None or valid_to > as_of):
            rows[memory_id] = {**row, "status": "active"}  # a copy: scoring reads the status it had then
            continue
        retired.add(memory_id)
    return retired


def answer_by_latest(
    candidates: dict[uuid.UUID, Candidate],
    supersedes: list[tuple[uuid.UUID, uuid.UUID]],
    successors: dict[uuid.UUID, set[uuid.UUID]],
    rows: dict[uuid.UUID, dict[str, Any]],
    *,
    keep: bool,
) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """Each superseded candidate's trace names its successors and when it stopped being current; each of its latest
    versions among the candidates (through a chain of superseded ones) answers for it (`answers_for`) and, when no
    ranker found that version itself, takes its fused rank (`rrf_score`: the fusion ranking's evidence). Returns the
    (newer, older) pairs of candidates, for select to order when the older are kept (`keep`)."""
    for newer, older in supersedes:  # the trace of every superseded candidate; at an `as_of`, of those current then too
        candidate = candidates.get(older)
        if candidate is not None and newer not in candidate.superseded_by:
            candidate.superseded_by = tuple(sorted((*candidate.superseded_by, newer), key=str))
            candidate.superseded_on = rows[older].get("valid_to")
    for memory_id, replacing in successors.items():
        candidate = candidates.get(memory_id)
        if candidate is None:
            continue
        candidate.superseded_on = rows[memory_id].get("valid_to")
        latest: set[uuid.UUID] = set()
        frontier, seen = list(replacing), {memory_id}
        while frontier:
            step = frontier.pop()
            if step in seen:
                continue
            seen.add(step)
            if step in successors:  # superseded too: its own successors answer
                frontier.extend(successors[step])
            elif step in candidates:
                latest.add(step)
        for answer in latest:
            successor = candidates[answer]
            successor.answers_for = (*successor.answers_for, memory_id)
            if successor.lexical_rank is None and successor.dense_rank is None and successor.period_rank is None:
                successor.rrf_score = max(successor.rrf_score, candidate.rrf_score)
    if not keep:
        return []
    return [(newer, older) for newer, older in supersedes if newer in candidates and older in candidates]


def inherit(
    candidates: dict[uuid.UUID, Candidate],
    supersedes: list[tuple[uuid.UUID, uuid.UUID]],
    rows: dict[uuid.UUID, dict[str, Any]],
    own: Callable[[uuid.UUID, Candidate], float],
) -> None:
    """Each (newer, older) edge whose older end is a candidate: the newer becomes one (one hop, via the older),
    and inherits the older's relevance (its own, or what it inherited: a chain of versions answers by its last).
    Edges are applied until nothing changes; a chain of n versions settles in n rounds."""
    olders = {older for _, older in supersedes}
    inherited = {i: own(i, c) for i, c in candidates.items() if i in olders}
    for _ in range(len(supersedes)):
        changed = False
        for newer, older in supersedes:
            if older not in inherited or newer not in rows or newer == older:
                continue
            candidate = candidates.get(newer)
            if candidate is None:
                candidate = candidates[newer] = Candidate(newer, hops=1, via=older, trail=(older,))
            if inherited[older] > candidate.inherited:
                candidate.inherited, candidate.inherited_from = inherited[older], older
                inherited[newer] = max(inherited.get(newer, 0.0), own(newer, candidate), candidate.inherited)
                changed = True
        if not changed:
            return
