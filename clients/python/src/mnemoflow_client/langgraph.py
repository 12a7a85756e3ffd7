"""`MnemoflowStore`: LangGraph's long-term memory store (`langgraph.store.base.BaseStore`) kept in Mnemoflow, one
memory per item, in the tenant the client acts for. Needs `pip install 'mnemoflow-client[langgraph]'`.

    from langgraph.graph import StateGraph
    from mnemoflow_client import Mnemoflow
    from mnemoflow_client.langgraph import MnemoflowStore

    store = MnemoflowStore(Mnemoflow(user_id="alice"))
    store.put(("alice", "prefs"), "drink", {"text": "green tea in the morning"})
    store.search(("alice",), query="what does Alice drink?")  # Mnemoflow's ranking, its scores
    graph = builder.compile(store=store)  # nodes taking `store: BaseStore` get it

How an item maps to a memory, and the limits, are in docs/clients.md ("LangGraph store")."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from langgraph.store.base import BaseStore, Op, Result, validate_op_namespace

from ._langgraph_ops import Operation, Options, operation
from .aio import AsyncMnemoflow
from .client import Mnemoflow
from .errors import MnemoflowError


class MnemoflowStore(BaseStore):
    """A LangGraph store whose items are Mnemoflow memories of one tenant.

    Args:
        client: a `Mnemoflow` (sync graphs and calls) or an `AsyncMnemoflow` (async ones) [a `Mnemoflow()` from
            $MNEMOFLOW_URL and $MNEMOFLOW_API_KEY, closed with the store].
        async_client: an `AsyncMnemoflow` for the async calls besides a sync `client` [without one, async calls
            run the sync client in a thread; without a sync one, sync calls (a sync node of an async graph) go
            through a `Mnemoflow` made with the async client's settings].
        user_id: the tenant the items belong to [the client's].
        index_fields: the value's fields whose text is searchable, as LangGraph paths (`"text"`, `"a.b"`,
            `"notes[*].body"`) [the whole value: `name: value` a line per field]; a put's `index=` overrides it.
        min_score: the least relevance a query's match needs to be returned [0: the best `limit`, however weak;
            None: the gateway's MNEMOFLOW_MIN_SCORE].
        min_evidence: the least evidence a query's best match needs for the query to return anything [0: off, a
            store's search ranks what it has; None: the gateway's MNEMOFLOW_MIN_EVIDENCE].
        max_k: the most matches one query asks for (the gateway's MNEMOFLOW_MAX_K, 200 by default): a search with a
            query sees at most this many of the best matches, before its filter and offset.
    """

    supports_ttl = False

    def __init__(
        self,
        client: Mnemoflow | AsyncMnemoflow | None = None,
        *,
        async_client: AsyncMnemoflow | None = None,
        user_id: str | None = None,
        index_fields: Sequence[str] | None = None,
        min_score: float | None = 0.0,
        min_evidence: float | None = 0.0,
        max_k: int = 200,
    ) -> None:
        self._owned = client is None and async_client is None
        if client is None and async_client is None:
            client = Mnemoflow()
        if isinstance(client, AsyncMnemoflow):
            client, async_client = None, async_client or client
        self._lock = threading.Lock()
        self.client: Mnemoflow | None = client
        self.async_client: AsyncMnemoflow | None = async_client
        self.options = Options(
            user_id=user_id,
            index_fields=tuple(index_fields) if index_fields is not None else None,
            min_score=min_score,
            min_evidence=min_evidence,
            max_k=max_k,
        )

    def __repr__(self) -> str:
        return f"MnemoflowStore({self.client or self.async_client!r}, user_id={self.options.user_id!r})"

    def close(self) -> None:
        """Close the client the store made for itself (clients handed to it stay open)."""
        if self._owned and self.client is not None:
            self.client.close()

    def _sync_client(self) -> Mnemoflow:
        # A store made with an AsyncMnemoflow only still serves sync calls: a graph run with `ainvoke` runs its sync
        # nodes in threads, and their `store.put(...)` comes here. They go through a Mnemoflow of the same settings.
        with self._lock:
            if self.client is None:
                assert self.async_client is not None
                settings = self.async_client.settings
                self.client = Mnemoflow(
                    settings.base_url,
                    settings.api_key or "",
                    user_id=settings.user_id,
                    timeout=settings.timeout,
                    retries=settings.retry,
                    headers=settings.headers,
                )
                self._owned = True
            return self.client

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Carry out LangGraph's operations in order, each through the sync client."""
        ops = _checked(ops)
        client = self._sync_client()
        return [_drive(client, operation(op, self.options)) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Carry out LangGraph's operations in order through the async client (the sync one in a thread without)."""
        ops = _checked(ops)
        client = self.async_client
        if client is None:
            return await asyncio.to_thread(self.batch, ops)
        return [await _adrive(client, operation(op, self.options)) for op in ops]


def _checked(ops: Iterable[Op]) -> list[Op]:
    # LangGraph's own methods check labels before batching; ops handed to batch directly are checked here, so a
    # label holding a period or a NUL never reaches the store.
    listed = list(ops)
    for op in listed:
        validate_op_namespace(op)
    return listed


def _drive(client: Mnemoflow, steps: Operation) -> Any:
    """Run an operation's calls on the sync client; its result."""
    try:
        step = next(steps)
        while True:
            try:
                answer = getattr(client, step.method)(**step.kwargs)
            except MnemoflowError as exc:
                step = steps.throw(exc)
            else:
                step = steps.send(answer)
    except StopIteration as done:
        return done.value


async def _adrive(client: AsyncMnemoflow, steps: Operation) -> Any:
    """Run an operation's calls on the async client; its result."""
    try:
        step = next(steps)
        while True:
            try:
                answer = await getattr(client, step.method)(**step.kwargs)
            except MnemoflowError as exc:
                step = steps.throw(exc)
            else:
                step = steps.send(answer)
    except StopIteration as done:
        return done.value


__all__ = ["MnemoflowStore"]
