"""`POST /memory/query`: the read path (shared.retrieval) over HTTP, and its bookkeeping after the answer."""

from __future__ import annotations

from fastapi import APIRouter, Response

from services.gateway.deps import PrincipalDep, StateDep
from services.gateway.querying import run_query
from shared.api.query import MatchTrace, PackingPublic, QueryMatch, QueryRequest, QueryResponse
from shared.retrieval.fusion import Candidate
from shared.retrieval.versions import answers_note, superseded_note

router = APIRouter(prefix="/memory", tags=["memory"])


@router.post("/query", response_model=QueryResponse)  # serialised by the route itself (exclude_none)
def query_memories(body: QueryRequest, state: StateDep, principal: PrincipalDep) -> Response:
    """Find the memories that matter for `query`: full-text + vector candidates, waypoints, composite score.

    The answer is serialised here rather than by FastAPI, which would validate the finished model again on
    a worker thread of its own first (a second thread hop and a second validation on the hottest route)."""
    user_id = principal.tenant(body.user_id, body.filters.user_id)
    outcome = run_query(state, user_id, body)
    matches = [_match(c, row, explain=body.explain) for c, row in outcome.matches]
    answer = QueryResponse(
        query=body.query,
        matches=matches,
        candidates=outcome.candidates,
        packing=PackingPublic(
            returned=len(outcome.packing.chosen),
            considered=outcome.packing.considered,
            tokens=outcome.packing.tokens,
            budget=outcome.packing.budget,
            footnote=outcome.packing.footnote,
        )
        if outcome.packing
        else None,
        timings_ms=outcome.timings_ms if body.explain else None,
        query_sectors=list(outcome.query_sectors) if body.explain else None,
        evidence=None if outcome.evidence is None or not body.explain else round(outcome.evidence, 6),
        unknown_names=list(outcome.unknown_names) if body.explain and outcome.unknown_names else None,
    )
    return Response(answer.model_dump_json(exclude_none=True), media_type="application/json")


def _match(c: Candidate, row: dict, *, explain: bool) -> QueryMatch:
    return QueryMatch(
        id=c.id,
        content=row["content"],
        score=round(c.score, 6),
        sectors=row["sectors"],
        primary_sector=row["primary_sector"],
        path=c.path,
        salience=row["salience"],
        last_seen_at=row["last_seen_at"],
        occurred_at=row.get("occurred_at"),
        tags=row["tags"],
        metadata=row["metadata"],
        document_id=row.get("document_id"),
        trace=MatchTrace(
            lexical_rank=c.lexical_rank,
            lexical_score=c.lexical_score,
            dense_rank=c.dense_rank,
            dense_similarity=c.dense_similarity,
            rrf_score=round(c.rrf_score, 6),
            period_rank=c.period_rank,
            hops=c.hops,
            via=str(c.via) if c.via else None,
            context_from=str(c.support_from) if c.components.get("context") else None,
            components=c.components,
            superseded_by=[str(i) for i in c.superseded_by] or None,
            superseded_on=c.superseded_on,
            answers_for=[str(i) for i in c.answers_for] or None,
            copy_of=str(c.copy_of) if c.copy_of else None,
            notes=_notes(c),
        )
        if explain
        else None,
    )


def _notes(c: Candidate) -> list[str] | None:
    """The trace's lines in words: what the versions and near-copy rules did to this match."""
    notes = []
    if c.superseded_on is not None or c.superseded_by:
        since = c.superseded_on.date().isoformat() if c.superseded_on else None
        notes.append(superseded_note(c.superseded_by, since))
    if c.answers_for:
        notes.append(answers_note(c.answers_for))
    if c.copy_of:
        notes.append(f"the same words as {c.copy_of}: moved below the other matches")
    return notes or None
