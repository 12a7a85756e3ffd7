"""`MnemoflowRetriever`: a LangChain retriever (`langchain_core.retrievers.BaseRetriever`) over a tenant's memories,
ranked by Mnemoflow's query. Comes with `pip install 'mnemoflow-client[langgraph]'` (langgraph brings langchain-core).

    from mnemoflow_client import Mnemoflow
    from mnemoflow_client.langchain import MnemoflowRetriever

    retriever = MnemoflowRetriever(client=Mnemoflow(user_id="alice"), k=4)
    for document in retriever.invoke("what does Alice drink?"):
        print(document.metadata["score"], document.page_content)
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from ._langgraph_map import namespace_tag
from .aio import AsyncMnemoflow
from .client import Mnemoflow
from .schemas.query import QueryMatch, QueryResponse


class MnemoflowRetriever(BaseRetriever):
    """The memories that matter for a query, best first, as LangChain documents: the memory's content as
    `page_content`; its id, score, sectors, tags and metadata in `metadata`.

    Fields: `client` (a `Mnemoflow`) and/or `async_client` (an `AsyncMnemoflow`; without it, `ainvoke` runs the
    sync client in a thread), `k`, `user_id` [the client's], `tags` (only memories carrying all of them),
    `namespace` (only the items of a `MnemoflowStore` under this namespace prefix), `min_score` and
    `min_evidence` [the gateway's], `reinforce` [the gateway's: a query reinforces what it returns].
    """

    client: Mnemoflow | None = None
    async_client: AsyncMnemoflow | None = None
    k: int = 4
    user_id: str | None = None
    tags: list[str] | None = None
    namespace: tuple[str, ...] | None = None
    min_score: float | None = None
    min_evidence: float | None = None
    reinforce: bool | None = None

    def _query_args(self, query: str) -> dict[str, Any]:
        tags = list(self.tags or [])
        if self.namespace is not None:
            tags.append(namespace_tag(self.namespace))
        return {
            "query": query,
            "k": self.k,
            "user_id": self.user_id,
            "tags": tags or None,
            "min_score": self.min_score,
            "min_evidence": self.min_evidence,
            "reinforce": self.reinforce,
        }

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        if self.client is None:
            raise RuntimeError("MnemoflowRetriever needs a Mnemoflow `client` for sync calls (or use ainvoke)")
        return _documents(self.client.query(**self._query_args(query)))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        if self.async_client is None:
            if self.client is None:
                raise RuntimeError("MnemoflowRetriever needs a `client` or an `async_client`")
            answer = await asyncio.to_thread(self.client.query, **self._query_args(query))
        else:
            answer = await self.async_client.query(**self._query_args(query))
        return _documents(answer)


def _document(match: QueryMatch) -> Document:
    metadata = {
        "id": str(match.id),
        "score": match.score,
        "primary_sector": match.primary_sector,
        "sectors": match.sectors,
        "tags": match.tags,
        "metadata": match.metadata,
    }
    return Document(page_content=match.content, metadata=metadata, id=str(match.id))


def _documents(answer: QueryResponse) -> list[Document]:
    return [_document(match) for match in answer.matches]


__all__ = ["MnemoflowRetriever"]
