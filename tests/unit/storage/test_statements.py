"""The read statement's parts: named, in order, never two of one name; the combined statement's parts are those
the separate link fetch reads, continued by the candidates' own."""

from __future__ import annotations

import numpy as np
import pytest

from shared.storage.candidates import _hit_ctes, _ranked_ctes
from shared.storage.neighbours import link_ctes, linked_rows
from shared.storage.rows import SectorVector
from shared.storage.statements import Cte, compose


def test_parts_are_written_in_order_with_materialized_where_asked():
    statement = compose([Cte("a", "SELECT 1 AS x"), Cte("b", "SELECT x FROM a", materialized=True)], "SELECT * FROM b")
    assert statement == "WITH a AS (SELECT 1 AS x),\nb AS MATERIALIZED (SELECT x FROM a)\nSELECT * FROM b"
    assert compose([], "SELECT 1") == "SELECT 1"


def test_a_name_given_twice_or_not_a_plain_name_is_refused():
    with pytest.raises(ValueError, match="'a'"):
        compose([Cte("a", "SELECT 1"), Cte("a", "SELECT 2")], "SELECT * FROM a")
    with pytest.raises(ValueError, match="plain"):
        Cte("a; DROP TABLE memories", "SELECT 1")


def test_the_combined_statement_continues_the_link_parts_without_editing_them():
    names = [c.name for c in (*_ranked_ctes("SELECT 1", "SELECT 2"), *_hit_ctes(10, None), *link_ctes("ids"))]
    ranked = ["lexical", "lexical_ranked", "dense_best", "dense_ranked", "ranked", "fused"]
    assert names == [*ranked, "direct", "hop1", "further", "links", "wanted"]
    with_period = [c.name for c in _hit_ctes(10, "SELECT 3")]
    assert with_period == ["best", "period_ranked", "fused"]


def test_the_link_fetch_alone_is_its_parts_and_its_select():
    params: dict[str, object] = {}
    query = {"semantic": SectorVector("m", np.ones(4, dtype=np.float32))}
    statement = compose(
        link_ctes("CAST(:ids AS uuid[])"), linked_rows(query, lambda d: (d,), params, known_cosine="'{}'")
    )
    assert statement.startswith("WITH direct AS (")
    assert statement.count(" AS (") >= 5 and "FROM memories m" in statement
    assert "m.id, m.user_id, m.primary_sector" in statement  # every lean column qualified
    assert set(params) >= {"cmodel0", "cq0_4"}
