"""MMR: relevance against redundancy with what is already chosen."""

from __future__ import annotations

import uuid

import numpy as np

from shared.retrieval.mmr import mmr_order


def unit(*values: float) -> np.ndarray:
    v = np.array(values, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_a_near_duplicate_gives_way_to_a_different_memory():
    python_a, python_b, team = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    relevance = {python_a: 0.9, python_b: 0.88, team: 0.7}
    vectors = {python_a: unit(1, 0, 0), python_b: unit(0.99, 0.1, 0), team: unit(0, 1, 0)}
    order = mmr_order([python_a, python_b, team], relevance, vectors, lambda_=0.5)
    assert [i for i, _ in order] == [python_a, team, python_b]
    redundancy = dict(order)
    assert redundancy[python_a] == 0.0 and redundancy[python_b] > 0.99 and redundancy[team] < 0.1


def test_lambda_one_is_plain_relevance_and_missing_vectors_are_unrelated():
    a, b, c = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    relevance = {a: 0.9, b: 0.8, c: 0.7}
    vectors = {a: unit(1, 0), b: unit(1, 0)}  # c has none
    assert [i for i, _ in mmr_order([a, b, c], relevance, vectors, lambda_=1.0)] == [a, b, c]
    assert [i for i, _ in mmr_order([a, b, c], relevance, vectors, lambda_=0.5)] == [a, c, b]


def test_vectors_of_another_dimension_are_not_compared():
    a, b = uuid.uuid4(), uuid.uuid4()
    order = mmr_order([a, b], {a: 0.9, b: 0.8}, {a: unit(1, 0, 0), b: unit(1, 0)}, lambda_=0.5)
    assert order == [(a, 0.0), (b, 0.0)]
