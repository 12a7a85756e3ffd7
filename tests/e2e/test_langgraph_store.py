"""LangGraph's long-term memory on Mnemoflow (mnemoflow_client.langgraph.MnemoflowStore) against the whole stack:
the store driven directly (items written, replaced in place, read, searched with and without a query, deleted; the
namespaces kept apart and listed), then from LangGraph itself: a compiled StateGraph whose nodes are handed the store,
a prebuilt ReAct agent with a scripted chat model whose tools use it, and the async path."""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore, GetOp, InvalidNamespaceError, PutOp, SearchOp
from mnemoflow_client import AsyncMnemoflow, Mnemoflow
from mnemoflow_client._langgraph_map import content_for, item_tag
from mnemoflow_client.langchain import MnemoflowRetriever
from mnemoflow_client.langgraph import MnemoflowStore

pytestmark = pytest.mark.e2e


@pytest.fixture
def client(gateway: str, tenant: str) -> Iterator[Mnemoflow]:
    with Mnemoflow(gateway, user_id=tenant) as made:
        yield made


@pytest.fixture
def store(client: Mnemoflow) -> MnemoflowStore:
    return MnemoflowStore(client)


def test_an_item_is_one_memory_written_replaced_in_place_and_deleted(store: MnemoflowStore, client: Mnemoflow):
    namespace = ("users", "alice", "prefs")
    store.put(namespace, "drink", {"text": "Alice drinks green tea in the morning", "cups": 2})
    first = store.get(namespace, "drink")
    assert first is not None and first.value == {"text": "Alice drinks green tea in the morning", "cups": 2}
    assert (first.namespace, first.key) == (namespace, "drink")
    (memory,) = client.list_memories(tags=[item_tag(namespace, "drink")]).items
    assert memory.content == "[users/alice/prefs] drink\ntext: Alice drinks green tea in the morning\ncups: 2"
    assert memory.metadata["langgraph"]["value"] == first.value and "langgraph-store" in memory.tags

    store.put(namespace, "drink", {"text": "Alice switched to black coffee", "cups": 3})
    store.put(namespace, "drink", {"text": "Alice switched to black coffee", "cups": 3})  # again: nothing more
    second = store.get(namespace, "drink")
    assert second is not None and second.value == {"text": "Alice switched to black coffee", "cups": 3}
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    (replaced,) = client.list_memories(tags=[item_tag(namespace, "drink")]).items
    assert replaced.id == memory.id and "black coffee" in replaced.content  # changed in place, re-embedded
    assert client.list_memories().total == 1

    store.delete(namespace, "drink")
    assert store.get(namespace, "drink") is None
    store.delete(namespace, "drink")  # deleting what is gone is done
    assert client.list_memories().total == 0
    assert store.get(("users", "nobody"), "drink") is None


def test_namespaces_are_kept_apart_searched_by_prefix_and_listed(store: MnemoflowStore, client: Mnemoflow):
    same = {"text": "likes hiking in the Alps"}  # the same value under two namespaces: two memories
    store.put(("users", "alice", "prefs"), "hobby", same)
    store.put(("users", "bob", "prefs"), "hobby", same)
    store.put(("users", "bob", "facts"), "city", {"text": "lives in Lyon"})
    store.put(("teams", "core"), "lead", {"text": "Bob leads the core team"})
    assert client.list_memories().total == 4

    (alices,) = client.list_memories(tags=[item_tag(("users", "alice", "prefs"), "hobby")]).items
    (bobs,) = client.list_memories(tags=[item_tag(("users", "bob", "prefs"), "hobby")]).items
    assert alices.id != bobs.id
    alice = store.search(("users", "alice"))
    assert [(i.namespace, i.key) for i in alice] == [(("users", "alice", "prefs"), "hobby")]
    assert alice[0].score is None
    bob = store.search(("users", "bob"))
    assert sorted(i.key for i in bob) == ["city", "hobby"]
    assert len(store.search(("users",))) == 3 and len(store.search(())) == 4
    assert store.search(("users", "carol")) == []
    page = [store.search(("users",), limit=2, offset=offset) for offset in (0, 2)]
    assert [len(p) for p in page] == [2, 1]
    assert len({(i.namespace, i.key) for p in page for i in p}) == 3
    assert [i.key for i in store.search((), filter={"text": "lives in Lyon"})] == ["city"]

    assert store.list_namespaces() == [
        ("teams", "core"),
        ("users", "alice", "prefs"),
        ("users", "bob", "facts"),
        ("users", "bob", "prefs"),
    ]
    assert store.list_namespaces(prefix=("users", "bob")) == [("users", "bob", "facts"), ("users", "bob", "prefs")]
    assert store.list_namespaces(suffix=("prefs",)) == [("users", "alice", "prefs"), ("users", "bob", "prefs")]
    assert store.list_namespaces(prefix=("users", "*", "prefs")) == [
        ("users", "alice", "prefs"),
        ("users", "bob", "prefs"),
    ]
    assert store.list_namespaces(max_depth=2) == [("teams", "core"), ("users", "alice"), ("users", "bob")]
    assert store.list_namespaces(max_depth=1, limit=1, offset=1) == [("users",)]

    with pytest.raises(InvalidNamespaceError):
        store.batch([GetOp(("users.alice",), "hobby")])  # a period would make another namespace: refused


def test_a_query_ranks_by_mnemoflow_and_filters_on_the_value(store: MnemoflowStore):
    notes = ("notes", "alice")
    store.put(notes, "tea", {"text": "Alice drinks green tea every morning", "year": 2021})
    store.put(notes, "bike", {"text": "Alice repairs bicycles on Saturdays", "year": 2023})
    store.put(notes, "garden", {"text": "Alice grows tomatoes in her garden", "year": 2024})
    store.put(("notes", "bob"), "tea", {"text": "Bob drinks green tea too", "year": 2022})

    found = store.search(notes, query="green tea morning", limit=3)
    assert found[0].key == "tea" and found[0].namespace == notes
    assert all(item.namespace == notes for item in found)  # Bob's tea is under another namespace
    assert all(isinstance(item.score, float) for item in found)
    assert [item.score for item in found] == sorted((item.score for item in found), reverse=True)

    recent = store.search(notes, query="what does Alice do", filter={"year": {"$gte": 2023}}, limit=5)
    assert sorted(item.key for item in recent) == ["bike", "garden"]
    assert store.search(notes, query="what does Alice do", filter={"year": {"$gt": 2030}}) == []
    best, second = (store.search(notes, query="green tea morning", limit=1, offset=n) for n in (0, 1))
    assert best[0].key == "tea" and len(second) == 1 and second[0].key != "tea"


def test_an_item_whose_content_the_tenant_already_has_is_told_apart(store: MnemoflowStore, client: Mnemoflow):
    # Mnemoflow keeps one memory per content: a memory the tenant wrote by hand with exactly an item's content
    # stays theirs, and the item becomes a memory of its own whose first line names it by its digest.
    namespace = ("notes",)
    taken = client.add(content_for(namespace, "k", "text: hello"))
    store.put(namespace, "k", {"text": "hello"})
    item = store.get(namespace, "k")
    assert item is not None and item.value == {"text": "hello"}
    assert client.get(taken.id).metadata == {}  # left as it was
    (memory,) = client.list_memories(tags=[item_tag(namespace, "k")]).items
    assert memory.id != taken.id and item_tag(namespace, "k") in memory.content
    store.put(namespace, "k", {"text": "hello"})  # replacing it meets the same content again
    assert [m.id for m in client.list_memories(tags=[item_tag(namespace, "k")]).items] == [memory.id]
    assert store.search(namespace) and len(store.search(namespace)) == 1


def test_index_false_and_index_fields_decide_what_is_searchable(store: MnemoflowStore, client: Mnemoflow):
    store.put(("docs",), "secret", {"text": "the vault code is 4711"}, index=False)
    store.put(("docs",), "report", {"title": "Quarterly report", "body": "Revenue grew", "id": 7}, index=["title"])
    contents = {m.metadata["langgraph"]["key"]: m.content for m in client.iter_memories()}
    assert contents == {"secret": "[docs] secret", "report": "[docs] report\nQuarterly report"}
    assert store.get(("docs",), "secret").value == {"text": "the vault code is 4711"}  # type: ignore[union-attr]


class Conversation(TypedDict):
    user: str
    facts: list[str]
    question: str
    recalled: Annotated[list[str], operator.add]


def remember(state: Conversation, *, store: BaseStore) -> dict[str, Any]:
    for number, fact in enumerate(state["facts"]):
        store.put(("memories", state["user"]), f"fact-{number}", {"text": fact})
    return {}


def recall(state: Conversation, *, store: BaseStore) -> dict[str, Any]:
    found = store.search(("memories", state["user"]), query=state["question"], limit=2)
    return {"recalled": [item.value["text"] for item in found]}


async def aremember(state: Conversation, *, store: BaseStore) -> dict[str, Any]:
    for number, fact in enumerate(state["facts"]):
        await store.aput(("memories", state["user"]), f"fact-{number}", {"text": fact})
    return {}


async def arecall(state: Conversation, *, store: BaseStore) -> dict[str, Any]:
    found = await store.asearch(("memories", state["user"]), query=state["question"], limit=2)
    return {"recalled": [item.value["text"] for item in found]}


def conversation_graph(remembering: Any = remember, recalling: Any = recall) -> StateGraph:
    builder = StateGraph(Conversation)
    builder.add_node("remember", remembering)
    builder.add_node("recall", recalling)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)
    return builder


def test_a_graph_writes_memories_in_one_node_and_recalls_them_in_another(store: MnemoflowStore):
    graph = conversation_graph().compile(store=store)
    facts = ["Dana's cat is called Pixel", "Dana works night shifts at the harbour", "Dana plays the cello"]
    output = graph.invoke({"user": "dana", "facts": facts, "question": "what is the name of Dana's cat?"})
    assert output["recalled"][0] == "Dana's cat is called Pixel" and len(output["recalled"]) == 2
    other = graph.invoke({"user": "eve", "facts": [], "question": "what is the name of Dana's cat?"})
    assert other["recalled"] == []  # Eve's namespace holds nothing of Dana's
    assert store.list_namespaces(prefix=("memories",)) == [("memories", "dana")]


def test_the_async_path_uses_the_async_client(gateway: str, tenant: str):
    async def scenario() -> tuple[Any, ...]:
        async with AsyncMnemoflow(gateway, user_id=tenant) as client:
            store = MnemoflowStore(client)
            await store.aput(("users", "frank"), "pet", {"text": "Frank has a parrot named Kiwi"})
            got = await store.aget(("users", "frank"), "pet")
            found = await store.asearch(("users",), query="parrot named Kiwi")
            namespaces = await store.alist_namespaces()
            results = await store.abatch(
                [PutOp(("users", "frank"), "pet", None), GetOp(("users", "frank"), "pet"), SearchOp(("users",))]
            )
            graph = conversation_graph(aremember, arecall).compile(store=store)
            output = await graph.ainvoke({"user": "gina", "facts": ["Gina sails"], "question": "who sails?"})
            # A sync node of an async graph runs in a thread and calls the sync methods: a Mnemoflow of the same
            # settings serves them, made by the store (and closed with it).
            mixed = conversation_graph(remember, arecall).compile(store=store)
            both = await mixed.ainvoke({"user": "hugo", "facts": ["Hugo rows"], "question": "who rows?"})
            store.close()
            return got, found, namespaces, results, (output, both)

    got, found, namespaces, results, (output, both) = asyncio.run(scenario())
    assert got is not None and got.value == {"text": "Frank has a parrot named Kiwi"}
    assert [(i.key, i.value) for i in found] == [("pet", got.value)] and found[0].score is not None
    assert namespaces == [("users", "frank")]
    assert results == [None, None, []]
    assert output["recalled"] == ["Gina sails"] and both["recalled"] == ["Hugo rows"]


def test_a_sync_store_serves_async_calls_in_a_thread(store: MnemoflowStore):
    asyncio.run(store.aput(("users", "hal"), "pet", {"text": "Hal has a tortoise"}))
    assert store.get(("users", "hal"), "pet").value == {"text": "Hal has a tortoise"}  # type: ignore[union-attr]


class ScriptedModel(GenericFakeChatModel):
    """Answers from a script; its tools are the agent's (the script already names them)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:  # type: ignore[override]
        return self


@tool
def save_note(text: str) -> str:
    """Remember a note about the user."""
    from langgraph.config import get_store

    get_store().put(("agent", "notes"), "latest", {"text": text})
    return "saved"


@tool
def find_notes(question: str) -> str:
    """Look up notes about the user."""
    from langgraph.config import get_store

    return "; ".join(item.value["text"] for item in get_store().search(("agent",), query=question, limit=3))


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")  # langchain's create_agent is not installed
def test_a_prebuilt_react_agent_runs_with_the_store(store: MnemoflowStore):
    prebuilt = pytest.importorskip("langgraph.prebuilt")
    script = iter(
        [
            AIMessage(
                "", tool_calls=[{"name": "save_note", "args": {"text": "Ivan is allergic to peanuts"}, "id": "1"}]
            ),
            AIMessage("", tool_calls=[{"name": "find_notes", "args": {"question": "allergic to peanuts"}, "id": "2"}]),
            AIMessage("Ivan is allergic to peanuts."),
        ]
    )
    agent = prebuilt.create_react_agent(ScriptedModel(messages=script), [save_note, find_notes], store=store)
    output = agent.invoke({"messages": [("user", "Remember that I am allergic to peanuts, then check.")]})
    tool_answers = [m.content for m in output["messages"] if isinstance(m, ToolMessage)]
    assert tool_answers == ["saved", "Ivan is allergic to peanuts"]
    assert store.get(("agent", "notes"), "latest").value == {"text": "Ivan is allergic to peanuts"}  # type: ignore[union-attr]


def test_a_langchain_retriever_finds_memories_and_the_stores_items(store: MnemoflowStore, gateway: str, tenant: str):
    client = store.client
    assert client is not None
    client.add("Jo keeps bees on the roof", tags=["hobbies"])
    store.put(("users", "jo"), "bees", {"text": "Jo sells honey from the bees at the market"})
    store.put(("users", "kim"), "bees", {"text": "Kim is afraid of bees"})

    everything = MnemoflowRetriever(client=client, k=5, min_score=0).invoke("bees")
    assert len(everything) == 3 and all(d.metadata["score"] is not None for d in everything)
    assert {d.id for d in everything} == {d.metadata["id"] for d in everything}
    joes = MnemoflowRetriever(client=client, namespace=("users", "jo"), min_score=0).invoke("bees")
    assert [d.metadata["metadata"]["langgraph"]["key"] for d in joes] == ["bees"]
    assert "sells honey" in joes[0].page_content
    tagged = MnemoflowRetriever(client=client, tags=["hobbies"], min_score=0).invoke("bees")
    assert [d.page_content for d in tagged] == ["Jo keeps bees on the roof"]

    async def asynchronously() -> list[Any]:
        async with AsyncMnemoflow(gateway, user_id=tenant) as aclient:
            retriever = MnemoflowRetriever(async_client=aclient, namespace=("users", "kim"), min_score=0)
            return await retriever.ainvoke("bees")

    assert [d.page_content for d in asyncio.run(asynchronously())] == ["[users/kim] bees\ntext: Kim is afraid of bees"]
