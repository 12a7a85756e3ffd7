"""The write and read paths of one test store, built once per test module."""

from __future__ import annotations

import pytest

from shared.embedding import SyntheticEmbedder
from shared.memory.engine import MemoryEngine
from shared.retrieval.service import Retriever


@pytest.fixture(scope="module")
def engine(settings) -> MemoryEngine:
    return MemoryEngine(settings, SyntheticEmbedder(dim=384))


@pytest.fixture(scope="module")
def retriever(settings, engine) -> Retriever:
    return Retriever(settings, engine.embedder)
