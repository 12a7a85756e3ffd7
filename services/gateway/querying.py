"""A tenant's query run by the gateway: the read path (shared.retrieval), its metrics, and its bookkeeping handed to
the aftermath thread (reinforcement of what it returned, active-query tokens, embed logs). `POST /memory/query` and
`POST /lgm/retrieve` both ask through here."""

from __future__ import annotations

import uuid

from services.gateway import metrics
from services.gateway.aftermath import QueryRecord
from services.gateway.state import GatewayState
from shared.api.query import QueryRequest
from shared.embedding.cost import windows
from shared.jobs import ReinforceHits
from shared.lifecycle.activity import query_finished
from shared.retrieval import stats as retrieval_stats
from shared.retrieval.service import QueryOutcome


def run_query(state: GatewayState, user_id: str, body: QueryRequest) -> QueryOutcome:
    """Answer `body` for `user_id` (charged to its query quota); what follows the answer is left to the aftermath."""
    settings = state.settings
    (tokens,) = state.engine.tokens([body.query])
    settings.limits.check_query_tokens(tokens)
    # charged to the tenant's quota by the model windows it fills, and counted active: the decay cycle waits for us
    active = state.limiter.admit_query(user_id, settings.active_query_ttl_seconds, units=windows(tokens))
    try:
        with state.db.reading(user_id) as session:
            # never the query's own pool, and acting for the same tenant
            side = state.lexical_db.bound(user_id).reading if state.lexical_db else None
            outcome = state.retriever.query(session, user_id, body, side_session=side)
    except BaseException:
        query_finished(state.redis, active)
        raise
    found = len(outcome.matches)
    metrics.QUERIES.labels(outcome="hit" if found else "empty").inc()
    metrics.QUERY_MATCHES.observe(found)
    for stage, ms in outcome.timings_ms.items():
        metrics.QUERY_STAGES.labels(stage).observe(ms / 1000)
    result = retrieval_stats.outcome(found, outcome.candidates)
    salt = settings.tenant_salt()
    metrics.TENANT_QUERIES.labels(
        tenant=metrics.tenant_label(user_id, settings.metrics_max_tenants, salt), outcome=result
    ).inc()
    # The bookkeeping is done after the response, gathered with other queries' (services/gateway/aftermath.py).
    reinforcement = after_effects(state, body, user_id, outcome)
    state.aftermath.add(QueryRecord(active, user_id, result, outcome.embed_calls, reinforcement))
    return outcome


def after_effects(state: GatewayState, body: QueryRequest, user_id: str, outcome: QueryOutcome) -> ReinforceHits | None:
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
