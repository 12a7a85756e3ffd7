"""The read path's first join: full-text and vector candidates fused by Reciprocal Rank Fusion (recall seed, k = 60).

`Candidate` is everything known about one memory on its way through the read path; it becomes the trace a
match carries. A candidate that a ranker found is a *hit*; one reached only through waypoints is not.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

T = TypeVar("T", bound=Hashable)


@dataclass
class Candidate:
    """Everything known about one memory on its way through the pipeline (becomes the trace)."""

    id: uuid.UUID
    lexical_rank: int | None = None
    lexical_score: float | None = None
    dense_rank: int | None = None
    dense_similarity: float | None = None
    rrf_score: float = 0.0
    hops: int = 0
    via: uuid.UUID | None = None
    trail: tuple[uuid.UUID, ...] = ()  # from the hit to `via`, for memories reached through waypoints
    waypoint_weight: float = 0.0
    activation: float = 0.0  # the relevance spread to it through waypoints (from its hit, or a linked hit's)
    support: float = 0.0  # the best relevance among the memories linked to it (graph.context_support)
    support_from: uuid.UUID | None = None
    inherited: float = 0.0  # the relevance of the older version it supersedes (expand.inherit)
    inherited_from: uuid.UUID | None = None
    # Versions (expand.answer_by_latest): the newer memories that supersede it and when it stopped being current; the
    # older versions it answers for. Near copies (select): the memory above it with the same words.
    superseded_by: tuple[uuid.UUID, ...] = ()
    superseded_on: datetime | None = None
    answers_for: tuple[uuid.UUID, ...] = ()
    copy_of: uuid.UUID | None = None
    in_period: bool = False  # it occurred in the period the query names (time anchoring)
    period_rank: int | None = None  # its rank in the search of that period, when that search found it
    similarity: float = 0.0
    relevance: float = 0.0  # how well it matches the query (the composite's similarity component): the gate's
    evidence: float | None = None  # what it shares with the query in absolute terms (evidence.py; the gate on)
    score: float = 0.0
    # The trace's components (`components`), kept as scoring left them until first read: a query scores ~100
    # candidates and returns a handful, and rounding every component of every one was 40 % of the score stage.
    _components: dict[str, float] = field(default_factory=dict, repr=False, compare=False)
    _trace: tuple[Callable[..., dict[str, float]], tuple[Any, ...]] | None = field(
        default=None, repr=False, compare=False
    )
    _notes: dict[str, float] = field(default_factory=dict, repr=False, compare=False)  # `note`s for that build

    @property
    def components(self) -> dict[str, float]:
        """The score's components, by name (the trace); built on first read from what scoring measured."""
        if self._trace is not None:
            build, measured = self._trace
            self._components, self._trace = build(*measured) | self._notes, None
            self._notes = {}
        return self._components

    def trace_later(self, build: Callable[..., dict[str, float]], *measured: Any) -> None:
        """Scoring's components, to be built as `build(*measured)` when first read (they replace any earlier ones).
        Values, not a closure: ~100 closures a query, each with a cell per value, made the collector run more."""
        self._components, self._trace, self._notes = {}, (build, measured), {}

    def note(self, name: str, value: float) -> None:
        """One more component (what a later stage measured: the evidence gate's), added to the trace without
        building it now."""
        if self._trace is None:
            self._components[name] = value
        else:
            self._notes[name] = value

    @property
    def path(self) -> list[str]:
        return [str(i) for i in (*self.trail, self.id)] if self.trail else [str(self.id)]

    @property
    def traversed(self) -> list[tuple[uuid.UUID, uuid.UUID]]:
        """The waypoints walked to reach this memory, in order."""
        steps = (*self.trail, self.id)
        return list(itertools.pairwise(steps))


def rrf_fuse(rankings: Sequence[Sequence[T]], k: int = 60) -> dict[T, float]:
    """Reciprocal Rank Fusion (Cormack et al. 2009): each id scores the sum of 1/(k + rank) over the lists."""
    if k < 0:
        raise ValueError(f"k must be non-negative, got {k}")
    scores: dict[T, float] = {}
    for ranking in rankings:
        seen: set[T] = set()
        for rank, item in enumerate(ranking, start=1):
            # A ranker listing an id twice (several chunks of one memory) counts only its best rank.
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return scores


def fuse(
    lexical: Sequence[tuple[uuid.UUID, float]],
    dense: Sequence[tuple[uuid.UUID, float]],
    *,
    rrf_k: int,
    limit: int,
) -> dict[uuid.UUID, Candidate]:
    """Reciprocal Rank Fusion of the two rankers; keeps the best `limit` (either list may be empty)."""
    fused = rrf_fuse([[i for i, _ in lexical], [i for i, _ in dense]], k=rrf_k)
    candidates: dict[uuid.UUID, Candidate] = {}
    for rank, (memory_id, score) in enumerate(lexical, start=1):
        candidates.setdefault(memory_id, Candidate(memory_id)).__dict__.update(lexical_rank=rank, lexical_score=score)
    for rank, (memory_id, sim) in enumerate(dense, start=1):
        candidates.setdefault(memory_id, Candidate(memory_id)).__dict__.update(dense_rank=rank, dense_similarity=sim)
    for memory_id, score in fused.items():
        candidates[memory_id].rrf_score = score
    best = sorted(candidates.values(), key=lambda c: (-c.rrf_score, str(c.id)))[:limit]
    return {c.id: c for c in best}
