"""Migration 0030 moves a store's vectors from the sector partitions into one table: every row kept (settled and
fresh), each distinct vector of a memory walked once (its primary sector's row first), the fresh codes of walked rows
only, one HNSW graph that finds every memory; its downgrade gives the partitions back, every fresh row with its code."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import create_engine, text

from infra.embedded import recreate_database
from infra.migrate import downgrade, upgrade
from shared.config import normalize_database_url
from shared.storage.vector_index import vector_index_names

pytestmark = pytest.mark.integration

DIM = 384
MODEL = "synthetic-hash-v1"
OTHER = "another-model"
# (content, primary sector, its sectors, indexed, the sectors whose vector is another model's own)
MEMORIES = [
    ("settled in three sectors", "semantic", ["semantic", "episodic", "emotional"], True, []),
    ("fresh in two sectors", "procedural", ["episodic", "procedural"], False, []),
    ("settled, one sector", "reflective", ["reflective"], True, []),
    ("fresh, one sector of another model", "emotional", ["emotional", "semantic"], False, ["semantic"]),
]


def vector(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def literal(v: np.ndarray) -> str:
    return "[" + ",".join(map(str, v.tolist())) + "]"


def rows(connection, sql: str) -> set[tuple]:
    return {tuple(r) for r in connection.execute(text(sql)).all()}


def test_the_partitions_become_one_table_and_one_graph_and_back(servers):
    url = recreate_database(servers["admin_url"], "mnemoflow_test_one_graph")
    upgrade(url, "0029")
    engine = create_engine(normalize_database_url(url))
    ids: dict[str, object] = {}
    try:
        with engine.begin() as connection:
            for n, (content, primary, sectors, indexed, others) in enumerate(MEMORIES):
                memory_id = connection.execute(
                    text(
                        "INSERT INTO memories (user_id, content, primary_sector, sectors, content_hash, salience, "
                        "decay_lambda) VALUES ('alice', :c, :p, :s, md5(:c), 0.5, 0.005) RETURNING id"
                    ),
                    {"c": content, "p": primary, "s": sectors},
                ).scalar_one()
                ids[content] = memory_id
                for sector in sectors:  # the sectors of one model share its vector, as the write path stores them
                    other = sector in others
                    connection.execute(
                        text(
                            "INSERT INTO memory_vectors (memory_id, sector, user_id, dim, model, indexed, embedding) "
                            "VALUES (:id, :sector, 'alice', :dim, :model, :indexed, CAST(:v AS vector))"
                        ),
                        {
                            "id": memory_id,
                            "sector": sector,
                            "dim": DIM,
                            "model": OTHER if other else MODEL,
                            "indexed": indexed,
                            "v": literal(vector(100 + n if other else n)),
                        },
                    )
            before = rows(connection, "SELECT memory_id, sector, indexed, model, embedding::text FROM memory_vectors")
            codes_before = rows(connection, "SELECT sector, memory_id FROM fresh_codes")
        assert len(codes_before) == 4  # every fresh row had its code

        upgrade(url)
        with engine.begin() as connection:
            assert connection.execute(text("SELECT to_regclass('memory_vectors_semantic')")).scalar_one() is None
            after = rows(connection, "SELECT memory_id, sector, indexed, model, embedding::text FROM memory_vectors")
            assert after == before  # every vector kept, in its place in the tiers
            walked = rows(connection, "SELECT memory_id, sector FROM memory_vectors WHERE walked")
            assert walked == {
                (ids["settled in three sectors"], "semantic"),  # the primary sector's row of the shared vector
                (ids["fresh in two sectors"], "procedural"),
                (ids["settled, one sector"], "reflective"),
                (ids["fresh, one sector of another model"], "emotional"),
                (ids["fresh, one sector of another model"], "semantic"),  # its own vector: walked too
            }
            codes = rows(connection, "SELECT memory_id, sector FROM fresh_codes")
            assert codes == {
                (ids["fresh in two sectors"], "procedural"),
                (ids["fresh, one sector of another model"], "emotional"),
                (ids["fresh, one sector of another model"], "semantic"),
            }
            indexes = rows(connection, "SELECT indexname FROM pg_indexes WHERE tablename = 'memory_vectors'")
            assert {(name,) for name in vector_index_names(DIM)} <= indexes  # the one graph, each sector's (0031)
            settled = connection.execute(
                text(f"SELECT memory_id FROM mnemoflow_nearest({DIM}, 'alice', :m, CAST(:q AS vector), 4)"),
                {"m": MODEL, "q": literal(vector(0))},
            ).scalars()
            # one walk finds each settled memory once, its own vector first
            assert list(settled) == [ids["settled in three sectors"], ids["settled, one sector"]]
            # some sectors: their rows, a memory found in two of them once
            within = connection.execute(
                text(
                    f"SELECT memory_id FROM mnemoflow_nearest({DIM}, 'alice', :m, CAST(:q AS vector), 4, "
                    "p_within => ARRAY['episodic', 'emotional', 'reflective'])"
                ),
                {"m": MODEL, "q": literal(vector(0))},
            ).scalars()
            assert list(within) == [ids["settled in three sectors"], ids["settled, one sector"]]

        downgrade(url, "0029")
        with engine.begin() as connection:
            parts = rows(
                connection,
                "SELECT tableoid::regclass::text, sector FROM memory_vectors",
            )
            assert all(part == f"memory_vectors_{sector}" for part, sector in parts)
            back = rows(connection, "SELECT memory_id, sector, indexed, model, embedding::text FROM memory_vectors")
            assert back == before
            assert rows(connection, "SELECT sector, memory_id FROM fresh_codes") == codes_before
        upgrade(url)  # and forward again
    finally:
        engine.dispose()
