"""The gate at its default: a paraphrase that shares no word with the query comes back; a query near no memory
returns nothing. With the shipped local model, in a store of its own (a store keeps one model per sector)."""

from __future__ import annotations

import pytest

from shared.api.memories import MemoryCreate
from shared.api.query import QueryRequest
from shared.config import Settings
from shared.embedding.factory import create_embedder
from shared.memory.engine import MemoryEngine
from shared.retrieval.evidence import GateParams
from shared.retrieval.params import RetrievalParams
from shared.retrieval.service import Retriever

pytestmark = pytest.mark.integration

ORCHID = "She repotted the orchid and moved it to the window"
OTHERS = (
    "Tom fixed the chain of his bike on Saturday",
    "The quarterly report is due on Friday",
    "We adopted a puppy and named him Max",
)


@pytest.fixture(scope="module")
def plants(make_store, servers):
    url, store = make_store("gate")
    database = store.bound("gardener")
    settings = Settings(database_url=url, redis_url=servers["redis_url"], embedding_provider="local")
    assert settings.min_score == RetrievalParams().min_score  # the shipped gate
    engine = MemoryEngine(settings, create_embedder(settings))
    with database.session() as s:
        for content in (ORCHID, *OTHERS):
            engine.add(s, "gardener", MemoryCreate(content=content))
    return database, Retriever(settings, engine.embedder)


PARAPHRASES = ["houseplant care", "looking after indoor plants", "gardening tips"]


@pytest.mark.parametrize("query", PARAPHRASES)
def test_a_paraphrase_sharing_no_word_with_the_memory_passes_the_default_relevance_gate(plants, query):
    database, retriever = plants
    with database.session() as s:  # the evidence gate off: what the relevance gate alone lets through
        outcome = retriever.query(s, "gardener", QueryRequest(query=query, explain=True, filters={"min_evidence": 0}))
    assert outcome.matches, f"{query!r} returned nothing"
    top, row = outcome.matches[0]
    assert row["content"] == ORCHID
    assert top.components["lexical"] == 0.0  # found by meaning alone


def test_a_query_near_no_memory_returns_nothing(plants):
    database, retriever = plants
    with database.session() as s:
        outcome = retriever.query(s, "gardener", QueryRequest(query="differential equations in thermodynamics"))
        ungated = retriever.query(
            s,
            "gardener",
            QueryRequest(query="differential equations in thermodynamics", filters={"min_score": 0, "min_evidence": 0}),
        )
    assert outcome.matches == []
    assert ungated.matches  # there were candidates: the gates dropped them


def test_the_evidence_gate_costs_the_loosest_paraphrases(plants):
    """The evidence gate's known cost (docs/retrieval.md): a paraphrase that shares no word with the memory has only
    its raw cosine for evidence. At cosine ~0.34 it still comes back; at ~0.2 ("houseplant care") the store
    answers nothing, and the response says why."""
    database, retriever = plants
    with database.session() as s:
        kept = retriever.query(s, "gardener", QueryRequest(query="looking after indoor plants", explain=True))
        lost = [retriever.query(s, "gardener", QueryRequest(query=q, explain=True)) for q in PARAPHRASES[::2]]
    assert kept.matches and kept.matches[0][1]["content"] == ORCHID
    assert kept.matches[0][0].components["coverage"] == 0.0  # its cosine alone carried it
    for outcome in lost:
        assert outcome.matches == []
        assert outcome.evidence is not None and outcome.evidence < GateParams().min_evidence
