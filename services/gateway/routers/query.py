"""`POST /memory/query`: the read path (shared.retrieval) over HTTP, and its bookkeeping after the answer."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Response

from services.gateway import metrics
from services.gateway.aftermath import QueryRecord
from services.gateway.deps import PrincipalDep, StateDep
from services.gateway.state import GatewayState
from shared.api.query import MatchTrace, PackingPublic, QueryMatch, QueryRequest, QueryResponse
from shared.backpressure import Quota
from shared.jobs import ReinforceHits
from shared.lifecycle.activity import query_finished, query_started
from shared.retrieval import stats as retrieval_stats
from shared.retrieval.fusion import Candidate
from shared.retrieval.service import QueryOutcome

router = APIRouter(prefix="/memory", tags=["memory"])


@router.post("/query", response_model=QueryResponse)  # serialised by the route itself (exclude_none)
def query_memories(body: QueryRequest, state: StateDep, principal: PrincipalDep) -> Response:
    """Find the memories that matter for `query`: full-text + vector candidates, waypoints, composite score.

    The answer is serialised here rather than by FastAPI, which would validate the finished model again on
    a worker thread of its own first (a second thread hop and a second validation on the hottest route)."""
    settings = state.settings
    user_id = principal.tenant(body.user_id, body.filters.user_id)
    state.limiter.charge(user_id, Quota.QUERIES)
    active = query_started(state.redis, settings.active_query_ttl_seconds)  # the decay cycle waits for us
    try:
        with state.db.reading(user_id) as session:
            # never the query's own pool, and acting for the same tenant
            side = state.lexical_db.bound(user_id).reading if state.lexical_db else None
            outcome = state.retriever.query(session, user_id, body, side_session=side)
    except BaseException:
        query_finished(state.redis, active)
        raise
    matches = [_match(c, row, explain=body.explain) for c, row in outcome.matches]
    metrics.QUERIES.labels(outcome="hit" if matches else "empty").inc()
    metrics.QUERY_MATCHES.observe(len(matches))
    result = retrieval_stats.outcome(len(matches), outcome.candidates)
    salt = settings.metrics_tenant_salt.get_secret_value()
    metrics.TENANT_QUERIES.labels(
        tenant=metrics.tenant_label(user_id, settings.metrics_max_tenants, salt), outcome=result
    ).inc()
    # The bookkeeping is done after the response, gathered with other queries' (services/gateway/aftermath.py).
    reinforcement = _after_effects(state, body, user_id, outcome)
    state.aftermath.add(QueryRecord(active, user_id, result, outcome.embed_calls, reinforcement))
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
        )
        if explain
        else None,
    )


def _after_effects(
    state: GatewayState, body: QueryRequest, user_id: str, outcome: QueryOutcome
) -> ReinforceHits | None:
    """The query's reinforcement of its hits and the regeneration of decayed ones, if there is any to do."""
    rules = state.engine.reinforcement  # resolved once, at start-up
    reinforce = body.reinforce and rules.on_query and bool(outcome.reinforce_ids)
    regenerate = body.reinforce and rules.regenerate and any(row["compression"] != "full" for _, row in outcome.matches)
    if not (reinforce or regenerate):
        return None
    return ReinforceHits(
        event_id=f"query:{uuid.uuid4()}",
        user_id=user_id,
        memory_ids=outcome.reinforce_ids,
        traversed=outcome.traversed,
        reinforce=reinforce,
        regenerate=regenerate,
    )
