"""The query-embedding cache on a real Redis-compatible server."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import redis

from infra.embedded import free_port
from shared.embedding import SyntheticEmbedder
from shared.embedding.cache import CachedEmbedder
from tests.conftest import SEALER

pytestmark = pytest.mark.integration


class CountingEmbedder(SyntheticEmbedder):
    """The real synthetic provider, counting the texts it was asked to embed."""

    def __init__(self) -> None:
        super().__init__(dim=64)
        self.embedded: list[str] = []

    def embed(self, texts):
        self.embedded.extend(texts)
        return super().embed(texts)


def test_a_repeated_query_is_served_from_redis(servers):
    client = redis.Redis.from_url(servers["redis_url"])
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner, client, ttl_seconds=60, sealer=SEALER, prefix="test:qemb")
    client.delete(cache.key("where is the boat"), cache.key("who fed the cat"))
    first = cache.embed(["where is the boat", "who fed the cat"])
    again = cache.embed(["who fed the cat", "where is the boat"])
    assert inner.embedded == ["where is the boat", "who fed the cat"]  # the second call computed nothing
    np.testing.assert_array_equal(again, first[::-1])
    np.testing.assert_array_equal(first, SyntheticEmbedder(dim=64).embed(["where is the boat", "who fed the cat"]))
    assert 0 < client.ttl(cache.key("who fed the cat")) <= 60
    assert cache.key("x") != CachedEmbedder(SyntheticEmbedder(dim=32), client, ttl_seconds=60, sealer=SEALER).key("x")


def test_a_redis_outage_costs_the_cache_not_the_query():
    dead = redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.2)
    inner = CountingEmbedder()
    vectors = CachedEmbedder(inner, dead, ttl_seconds=60, sealer=SEALER).embed(["still answered"])
    assert vectors.shape == (1, 64) and inner.embedded == ["still answered"]


def test_written_behind_an_entry_answers_at_once_and_reaches_redis_on_flush(servers):
    client = redis.Redis.from_url(servers["redis_url"])
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner, client, ttl_seconds=60, sealer=SEALER, prefix="test:qemb-behind", write_behind=True)
    key = cache.key("where is the lantern", "t1")
    client.delete(key)
    first, _ = cache.embed_logged(["where is the lantern"], tenant="t1")
    assert client.get(key) is None  # not on the query's path
    again, call = cache.embed_logged(["where is the lantern"], tenant="t1")
    assert call is None and inner.embedded == ["where is the lantern"]  # answered from the pending entry
    np.testing.assert_array_equal(again, first)
    assert cache.flush() == 1 and cache.flush() == 0
    assert SEALER.open(key, client.get(key)) == first[0].tobytes() and 0 < client.ttl(key) <= 60
    other = CachedEmbedder(CountingEmbedder(), client, ttl_seconds=60, sealer=SEALER, prefix="test:qemb-behind")
    np.testing.assert_array_equal(other.embed_logged(["where is the lantern"], tenant="t1")[0], first)  # from Redis


def test_entries_waiting_for_a_flush_are_bounded(servers):
    client = redis.Redis.from_url(servers["redis_url"])
    cache = CachedEmbedder(
        CountingEmbedder(),
        client,
        ttl_seconds=60,
        sealer=SEALER,
        prefix="test:qemb-bound",
        write_behind=True,
        max_pending=3,
    )
    texts = [f"question {uuid.uuid4().hex}" for _ in range(5)]
    assert cache.embed(texts[:2]).shape == (2, 64) and cache.embed(texts[2:]).shape == (3, 64)  # all answered
    assert cache.flush() == 3  # the first three kept; the rest cost the cache only
    assert [client.exists(cache.key(t)) for t in texts] == [1, 1, 1, 0, 0]
