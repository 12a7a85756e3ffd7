"""The fresh tier's binary codes (migration 0016) on real PostgreSQL: the triggers keep one code per fresh vector
through every write, and the dense search's first pass over them finds what the exact comparison finds."""

from __future__ import annotations

import random

import numpy as np
import pytest
from sqlalchemy import text

from shared.api.memories import MemoryCreate
from shared.db import schema_session
from shared.storage import search
from shared.storage.rows import MemoryFilter, SectorVector

pytestmark = pytest.mark.integration

TOPICS = ["harbour", "invoice", "violin", "glacier", "compiler", "orchard", "passport", "tide", "lantern", "quartz"]


def texts(n: int, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.choice(TOPICS)} {rng.choice(TOPICS)} {rng.choice(TOPICS)} note {i}" for i in range(n)]


def bulk(db, engine, tenant: str, contents: list[str]) -> None:
    with db.session() as s:
        engine.store(s, engine.prepare([MemoryCreate(content=c) for c in contents], tenant)[0], settle=False)


def mismatched_codes(maintenance, tenant: str) -> dict[str, int]:
    """Fresh vectors without their code, codes without their fresh vector, and codes unlike their vector's."""
    with maintenance.session() as s:
        row = s.execute(
            text(
                """
                SELECT
                  (SELECT count(*) FROM memory_vectors v WHERE v.user_id = :u AND NOT v.indexed AND NOT EXISTS
                     (SELECT 1 FROM fresh_codes c WHERE c.sector = v.sector AND c.memory_id = v.memory_id)) AS uncoded,
                  (SELECT count(*) FROM fresh_codes c WHERE c.user_id = :u AND NOT EXISTS
                     (SELECT 1 FROM memory_vectors v WHERE v.sector = c.sector AND v.memory_id = c.memory_id
                      AND NOT v.indexed)) AS orphaned,
                  (SELECT count(*) FROM fresh_codes c JOIN memory_vectors v
                     ON v.sector = c.sector AND v.memory_id = c.memory_id
                   WHERE c.user_id = :u AND (c.code <> binary_quantize(v.embedding)::varbit OR c.dim <> v.dim
                     OR c.model <> v.model)) AS stale,
                  (SELECT count(*) FROM fresh_codes c WHERE c.user_id = :u) AS codes
                """
            ),
            {"u": tenant},
        ).one()
    return dict(row._mapping)


def test_every_fresh_vector_has_its_code_through_store_change_merge_and_delete(db, maintenance, engine, tenant):
    bulk(db, engine, tenant, texts(40))
    state = mismatched_codes(maintenance, tenant)
    assert state["codes"] >= 40
    assert (state["uncoded"], state["orphaned"], state["stale"]) == (0, 0, 0)

    with maintenance.session() as s:  # a fresh vector changed in place (decay's compression, a re-embed's swap)
        s.execute(
            text(
                "UPDATE memory_vectors SET embedding = CAST(:v AS vector) WHERE user_id = :u AND NOT indexed "
                "AND memory_id IN (SELECT memory_id FROM memory_vectors WHERE user_id = :u LIMIT 5)"
            ),
            {"u": tenant, "v": "[" + ",".join(["-0.5", "0.5"] * 192) + "]"},
        )
        gone = s.execute(
            text("SELECT id FROM memories WHERE user_id = :u ORDER BY created_at LIMIT 3"), {"u": tenant}
        ).scalars()
        s.execute(text("DELETE FROM memories WHERE id = ANY(:ids)"), {"ids": list(gone)})
    state = mismatched_codes(maintenance, tenant)
    assert (state["uncoded"], state["orphaned"], state["stale"]) == (0, 0, 0)

    with maintenance.session() as s:
        while engine.merge_fresh(s, limit=7)[0]:  # several statements, each indexing some
            pass
    assert mismatched_codes(maintenance, tenant)["codes"] == 0

    with maintenance.session() as s:  # an indexed vector put back in the fresh tier gets its code again
        s.execute(text("UPDATE memory_vectors SET indexed = false WHERE user_id = :u"), {"u": tenant})
    state = mismatched_codes(maintenance, tenant)
    assert state["codes"] > 0 and (state["uncoded"], state["orphaned"], state["stale"]) == (0, 0, 0)


def test_codes_follow_a_tenant_renamed_with_the_operators_sql(db, maintenance, engine, tenant, settings):
    """docs/configuration.md's rename moves memories and vectors, not codes: the update trigger moves the codes of
    the fresh ones, and the deferred keys hold at commit."""
    bulk(db, engine, tenant, texts(12))
    renamed = f"{tenant}-moved"
    with schema_session(settings, "mnemoflow.tests.codes") as s:
        s.execute(text("SET CONSTRAINTS ALL DEFERRED"))
        for table in ("memories", "memory_vectors", "term_stats", "tenant_stats"):
            s.execute(text(f"UPDATE {table} SET user_id = :new WHERE user_id = :old"), {"old": tenant, "new": renamed})
        s.commit()
    moved = mismatched_codes(maintenance, renamed)
    assert moved["codes"] >= 12 and (moved["uncoded"], moved["orphaned"], moved["stale"]) == (0, 0, 0)
    assert mismatched_codes(maintenance, tenant)["codes"] == 0


def test_the_query_code_is_what_the_server_computes(maintenance):
    vector = np.array([0.3, -0.2, 0.0, 1e-9, -1e-9, 5.0], dtype=np.float32)
    with maintenance.session() as s:
        served = s.execute(
            text("SELECT binary_quantize(CAST(:v AS vector))::text"), {"v": "[" + ",".join(map(str, vector)) + "]"}
        ).scalar_one()
    assert search.binary_code(vector) == served == "100101"


def exact_fresh(session, tenant: str, vector: np.ndarray, model: str, limit: int) -> list:
    """The tenant's fresh semantic vectors nearest `vector`, compared one by one (the fresh branch before codes)."""
    return list(
        session.execute(
            text(
                "SELECT memory_id FROM memory_vectors WHERE sector = 'semantic' AND user_id = :u AND NOT indexed "
                "AND dim = 384 AND model = :m ORDER BY embedding::vector(384) <=> CAST(:q AS vector(384)) LIMIT :k"
            ),
            {"u": tenant, "m": model, "q": "[" + ",".join(map(str, vector.tolist())) + "]", "k": limit},
        ).scalars()
    )


@pytest.mark.parametrize("n", [150, 3000])
def test_the_first_pass_finds_what_the_exact_comparison_finds(db, engine, tenant, n):
    """Below the shortlist every fresh vector is compared, so the dense search is exact; far above it, a memory's
    own text still finds it first, and most of the exact nearest are found."""
    contents = texts(n, seed=n)
    bulk(db, engine, tenant, contents)
    model = engine.embedder.model
    overlaps = []
    firsts = 0
    with db.session() as s:
        semantic = set(
            s.execute(
                text(
                    "SELECT m.content FROM memories m JOIN memory_vectors v ON v.memory_id = m.id "
                    "WHERE m.user_id = :u AND v.sector = 'semantic'"
                ),
                {"u": tenant},
            ).scalars()
        )
        asked = random.Random(n).sample(sorted(semantic), 20)
        for content in asked:
            vector = np.asarray(engine.embedder.embed([content])[0], dtype=np.float32)
            searched = {"semantic": SectorVector(model, vector)}
            got = [i for i, _ in search.dense_candidates(s, tenant, searched, limit=32, where=MemoryFilter())]
            exact = exact_fresh(s, tenant, vector, model, 32)
            own = s.execute(
                text("SELECT id FROM memories WHERE user_id = :u AND content = :c"), {"u": tenant, "c": content}
            ).scalar_one()
            firsts += got[0] == own
            if n <= search.FRESH_SHORTLIST:
                assert set(got) == set(exact)
            overlaps.append(len(set(got) & set(exact)) / len(exact))
    assert firsts == len(asked)
    assert sum(overlaps) / len(overlaps) >= 0.8, overlaps
