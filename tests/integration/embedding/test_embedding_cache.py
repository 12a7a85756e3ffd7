"""The query-embedding cache on a real Redis-compatible server."""

from __future__ import annotations

import numpy as np
import pytest
import redis

from infra.embedded import free_port
from shared.embedding import SyntheticEmbedder
from shared.embedding.cache import CachedEmbedder

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
    cache = CachedEmbedder(inner, client, ttl_seconds=60, prefix="test:qemb")
    client.delete(cache.key("where is the boat"), cache.key("who fed the cat"))
    first = cache.embed(["where is the boat", "who fed the cat"])
    again = cache.embed(["who fed the cat", "where is the boat"])
    assert inner.embedded == ["where is the boat", "who fed the cat"]  # the second call computed nothing
    np.testing.assert_array_equal(again, first[::-1])
    np.testing.assert_array_equal(first, SyntheticEmbedder(dim=64).embed(["where is the boat", "who fed the cat"]))
    assert 0 < client.ttl(cache.key("who fed the cat")) <= 60
    assert cache.key("x") != CachedEmbedder(SyntheticEmbedder(dim=32), client, ttl_seconds=60).key("x")


def test_a_redis_outage_costs_the_cache_not_the_query():
    dead = redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.2)
    inner = CountingEmbedder()
    vectors = CachedEmbedder(inner, dead, ttl_seconds=60).embed(["still answered"])
    assert vectors.shape == (1, 64) and inner.embedded == ["still answered"]
