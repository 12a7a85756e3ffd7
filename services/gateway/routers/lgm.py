"""/lgm/*: OpenMemory's LangGraph memory: a graph node's memories in a namespace (shared.memory.langgraph)."""

from __future__ import annotations

from fastapi import APIRouter

from services.gateway.deps import PrincipalDep, StateDep, WorkDep
from services.gateway.querying import run_query
from shared.api.lgm import (
    LgmConfig,
    LgmContext,
    LgmContextResult,
    LgmReflection,
    LgmRetrieve,
    LgmRetrieved,
    LgmStore,
    LgmStored,
)
from shared.api.query import QueryFilters, QueryRequest
from shared.backpressure import Quota
from shared.embedding.cost import windows
from shared.memory import lgm
from shared.memory.langgraph import LangGraphMemory, found

router = APIRouter(prefix="/lgm", tags=["langgraph"])


def _graphs(state: StateDep) -> LangGraphMemory:
    return LangGraphMemory(state.engine, state.settings.lgm)


@router.post("/store", response_model=LgmStored)
def store(body: LgmStore, state: StateDep, work: WorkDep, principal: PrincipalDep) -> LgmStored:
    """Store a node's memory in its node's sector (observe → episodic, plan → semantic, reflect → reflective,
    act → procedural, emotion → emotional, any other → semantic), scoped to the namespace and graph; with an
    automatic reflection of it unless `reflective` is false (OM_LG_REFLECTIVE)."""
    user_id = principal.tenant(body.user_id)
    state.limiter.charge(user_id, Quota.WRITES, windows(state.engine.check_content(body.content)))
    return _graphs(state).store(work.session, user_id, body, reading=lambda: state.db.reading(user_id))


@router.post("/retrieve", response_model=LgmRetrieved)
def retrieve(body: LgmRetrieve, state: StateDep, work: WorkDep, principal: PrincipalDep) -> LgmRetrieved:
    """A node's memories in the namespace (and graph): with `query`, the best matches in the node's sector (a query
    like `POST /memory/query`, which reinforces what it returns); without, the newest of the node's sector."""
    user_id = principal.tenant(body.user_id)
    graphs = _graphs(state)
    node = lgm.node_name(body.node_or(None))
    namespace, limit = graphs.namespace(body.namespace), graphs.limit(body.limit or body.k)
    sector = lgm.node_sector(node)
    if body.query:
        question = QueryRequest(
            query=body.query,
            k=min(limit * 2, state.settings.max_k),  # OpenMemory asks for twice the limit, then keeps the namespace's
            filters=QueryFilters(sectors=[sector], tags=lgm.scope_tags(namespace, body.graph_id)),
        )
        outcome = run_query(state, user_id, question)
        matches = ((c.id, round(c.score, 6), c.path, row) for c, row in outcome.matches)
        items = found(matches, namespace, body.graph_id, limit, include_metadata=body.include_metadata)
    else:
        state.limiter.charge(user_id, Quota.QUERIES)
        items = graphs.recent(
            work.session, user_id, node, namespace, body.graph_id, limit, include_metadata=body.include_metadata
        )
    return LgmRetrieved(
        node=node,
        sector=sector,
        namespace=namespace,
        graph_id=body.graph_id,
        query=body.query or None,
        count=len(items),
        items=items,
    )


@router.post("/context", response_model=LgmContextResult)
def context(body: LgmContext, state: StateDep, work: WorkDep, principal: PrincipalDep) -> LgmContextResult:
    """The namespace's (or graph's) newest memories of every node, grouped by node with its sector (an equal share
    of `limit` each), and a summary with a line per memory."""
    user_id = principal.tenant(body.user_id)
    state.limiter.charge(user_id, Quota.QUERIES)
    return _graphs(state).context(work.session, user_id, body)


@router.post("/reflection", response_model=LgmStored)
def reflection(body: LgmReflection, state: StateDep, work: WorkDep, principal: PrincipalDep) -> LgmStored:
    """Store a reflection in the `reflect` node (reflective sector): `content`, or, without it, one extracted from
    the namespace's (or graph's) context, no model: the terms its memories share and the memories themselves."""
    user_id = principal.tenant(body.user_id)
    state.limiter.charge(user_id, Quota.WRITES)
    return _graphs(state).reflect(work.session, user_id, body)


@router.get("/config", response_model=LgmConfig)
def config(state: StateDep, principal: PrincipalDep) -> LgmConfig:
    """OpenMemory's LangGraph configuration: the default namespace, the context size, automatic reflections, and
    which sector each node's memories go to. The same for every tenant."""
    params = state.settings.lgm
    return LgmConfig(
        mode="standard",  # OpenMemory's OM_MODE: Mnemoflow has one mode, the /lgm routes are always on
        namespace_default=params.namespace,
        max_context=params.max_context,
        reflective=params.reflective,
        node_sector_map=dict(lgm.NODE_SECTORS),
    )
