"""The query vector at each rung of the compression ladder, as the read path binds it."""

from __future__ import annotations

import numpy as np
import pytest

from shared.lifecycle.compression import pool_to
from shared.storage.search import query_rungs


def ladder(dim: int) -> tuple[int, ...]:
    return (dim, dim // 2, dim // 4)


def test_each_rung_is_the_query_pooled_as_memories_are_and_the_full_rung_is_the_query_itself():
    query = np.random.default_rng(3).standard_normal(384).astype(np.float32)
    rungs = query_rungs(query, ladder)
    assert list(rungs) == [384, 192, 96]
    assert rungs[384] is query
    for dim in (192, 96):
        np.testing.assert_array_equal(rungs[dim], pool_to(query, dim))


def test_a_repeated_query_shares_its_pooled_rungs_which_nobody_can_change():
    query = np.random.default_rng(4).standard_normal(384).astype(np.float32)
    first, again = query_rungs(query, ladder), query_rungs(query.copy(), ladder)
    assert again[192] is first[192]  # pooled once: the statement binds them twice, and questions repeat
    with pytest.raises(ValueError):
        first[192][0] = 1.0
    other = query_rungs(-query, ladder)
    np.testing.assert_array_equal(other[192], pool_to(-query, 192))
