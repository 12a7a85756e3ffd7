"""The read path's SQL besides full text and links: dense and period candidates, the rows' cosines to the query.

Reads go straight through psycopg (`shared.db.read_rows`): binary parameters, no ORM layers.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import numpy as np
from pgvector import Vector
from sqlalchemy.orm import Session

from shared.db import read_rows
from shared.lifecycle.compression import pool_to
from shared.memory.sectors import SECTORS, group_sectors
from shared.storage.rows import MemoryFilter, SectorVector, filter_arguments, occurred_sql

# Fresh vectors a query compares exactly (at least; four times its limit when that is more), the nearest of the
# tenant's fresh vectors by their binary codes: a memory's own text is at distance 0, and beyond a few thousand
# fresh vectors the first pass costs less than reading them (tests/integration/storage/test_fresh_codes.py).
FRESH_SHORTLIST = 400


def binary_code(vector: np.ndarray) -> str:
    """pgvector's `binary_quantize` of `vector` as a bit string (1 where an element is above 0): the query's side of
    the fresh tier's first pass."""
    return ((np.asarray(vector) > 0).astype(np.uint8) + ord("0")).tobytes().decode()


def query_rungs(vector: np.ndarray, ladder: Callable[[int], Sequence[int]]) -> dict[int, np.ndarray]:
    """The query at each rung its model's vectors may be compressed to (pooled the way memories are)."""
    full = np.asarray(vector, dtype=np.float32)
    key = full.tobytes()
    return {dim: full if dim == full.shape[0] else _pooled(key, dim) for dim in ladder(int(full.shape[0]))}


@functools.lru_cache(maxsize=64)
def _pooled(vector: bytes, dim: int) -> np.ndarray:
    """A query vector pooled to `dim`, read-only: a query's statement binds its rungs twice (the search and the
    cosines of what the links reach), and a question asked again finds them made."""
    pooled = pool_to(np.frombuffer(vector, dtype=np.float32), dim)
    pooled.flags.writeable = False
    return pooled


def compressed_rungs(session: Session, user_id: str, dims: Sequence[int]) -> set[int]:
    """The dimensions among `dims` on which the tenant has vectors: one probe of the (user_id, dim) index per
    dimension, in one round trip, so a query searches a compressed rung's graph only where it can find something.
    The dimension is a literal on purpose: with a parameter the planner cannot see that a rung is rare and scans.

    A separate round trip on purpose, too: written into the search itself as one-time filters, the rungs'
    branches cost more to plan on every query (~2.4 ms of the dense stage's ~5.5 at 100k) than this probe."""
    if not dims:
        return set()
    return {int(r.dim) for r in read_rows(session, rungs_sql(dims), {"user_id": user_id})}


def rungs_sql(dims: Sequence[int]) -> str:
    """`compressed_rungs`' statement (`dim`; binds `user_id`); `dims` not empty."""
    return " UNION ALL ".join(
        f"SELECT {int(dim)} AS dim WHERE EXISTS "
        f"(SELECT 1 FROM memory_vectors WHERE user_id = :user_id AND dim = {int(dim)})"
        for dim in dims
    )


def dense_candidates(
    session: Session,
    user_id: str,
    queries: Mapping[str, SectorVector],
    *,
    limit: int,
    where: MemoryFilter,
    ladder: Callable[[int], Sequence[int]] = lambda dim: (dim,),
) -> list[tuple[uuid.UUID, float]]:
    """Nearest memories by cosine, one walk of the HNSW graph per model and rung, best similarity per memory, best
    first.

    `ladder`: the dimensions a model's vectors may have been compressed to (decay); each rung the tenant has
    vectors on is searched with the query pooled to it, through that rung's own partial HNSW index.

    `queries`: the sectors to search, each with the query embedded by that sector's model; only vectors
    of that model count (during a re-embed a store holds two models' vectors), and only memories of those sectors
    (a filter of the walk, unless every sector is searched).
    """
    if not queries:
        return []
    smaller = smaller_rungs(queries, ladder)
    present = compressed_rungs(session, user_id, smaller) if smaller else set()
    statement, params = dense_plan(queries, limit=limit, where=where, ladder=ladder, present=present)
    rows = read_rows(session, statement, params | {"user_id": user_id})
    best: dict[uuid.UUID, float] = {}
    for r in rows:
        best[r.memory_id] = max(best.get(r.memory_id, -1.0), float(r.sim))
    return sorted(best.items(), key=lambda kv: (-kv[1], str(kv[0])))


def smaller_rungs(queries: Mapping[str, SectorVector], ladder: Callable[[int], Sequence[int]]) -> list[int]:
    """The compressed rungs below the queries' own dimensions (those `compressed_rungs` probes), ascending."""
    return sorted({d for query, _ in group_sectors(queries) for d in ladder(int(query.vector.shape[0]))[1:]})


def dense_plan(
    queries: Mapping[str, SectorVector],
    *,
    limit: int,
    where: MemoryFilter,
    ladder: Callable[[int], Sequence[int]],
    present: set[int],
) -> tuple[str, dict[str, Any]]:
    """`dense_candidates`' statement (`memory_id`, `sim`: a memory once per vector found, unordered) and its
    parameters but `user_id`; `present`: the compressed rungs the tenant has vectors on (`compressed_rungs`)."""
    params: dict[str, Any] = {}
    parts = []
    for g, (query, sectors) in enumerate(group_sectors(queries)):
        params[f"model{g}"] = query.model
        # The filter on the memory of row `v`: the caller's, and the group's sectors unless it searches all of them
        # (every sector's vectors are in one graph).
        chosen = [sector for sector in sectors if not where.sectors or sector in where.sectors]
        if not chosen:
            continue
        within = None if set(chosen) == set(SECTORS) else chosen
        # the settled rows' search takes the sectors apart (`p_within`: it may read their rows instead of walking)
        nearest_filter = _filter_arguments(replace(where, sectors=None), params, f"nearest_filter{g}", f"_n{g}")
        fresh_filter = _filter_arguments(replace(where, sectors=within), params, f"fresh_filter{g}", f"_f{g}")
        if within is not None:
            params[f"within{g}"] = within
            nearest_filter += f", p_within => CAST(:within{g} AS text[])"
        for dim, vector in query_rungs(query.vector, ladder).items():
            if dim != int(query.vector.shape[0]) and dim not in present:
                continue
            name = f"q{g}_{dim}"
            distance = f"v.embedding::vector({dim}) <=> CAST(:{name} AS vector({dim}))"
            params[name] = Vector(vector)
            # Settled rows through `mnemoflow_nearest` (migrations 0017, 0030): one walk of the rung's graph, its
            # statement planned on every call for the tenant, so a small tenant reads its own rows and a large one
            # walks the HNSW index, whatever the store's other tenants. The rest is planned once: the limit is a
            # literal, like the dimension, so the generic plan of the prepared statement (psycopg prepares a
            # statement on its fifth run on a connection) costs no more than a custom one and the server keeps it,
            # instead of planning the statement again on every query (about half of its time at 100k).
            parts.append(
                f"""(SELECT n.memory_id, n.sim FROM mnemoflow_nearest({dim}, :user_id, :model{g},
                     CAST(:{name} AS vector({dim})), {int(limit)}{nearest_filter}) n)"""
            )
            # ... and the tenant's fresh rows: their binary codes (of walked rows only) ranked by Hamming distance (a
            # narrow table: migration 0016), the best FRESH_SHORTLIST of them compared exactly. A tenant with fewer
            # fresh vectors than that has them all compared: exact, as before.
            # The first pass is `mnemoflow_fresh` (migration 0019), planned for the tenant on each call like the
            # settled rows' search: in the kept plan, made for the average tenant, a tenant with nothing fresh read
            # the whole table while another tenant's burst waited in it (6 ms a query at 108,000 codes). The
            # query's code goes in typed, read once (a cast of the text parameter per code was half the first pass).
            # Each vector is read by its key alone (a code has its vector's tenant, dimension and model, kept by the
            # triggers), in a lateral subquery (its `LIMIT 1` keeps it one: merged into a join, on a small store the
            # planner may hash the whole table instead) whose `IS NOT TRUE` no partial index of fresh rows can
            # serve: joined on the key with `NOT v.indexed`, a plan made while the statistics said "nothing is fresh"
            # (a prepared statement keeps it until they are refreshed) scanned the tenant's whole fresh index once per
            # code, 4 to 8 s a query at 100,000 fresh vectors; with the tenant's or the dimension's condition the
            # planner, on such statistics, intersected the key with the tenant's whole (user_id, dim) index for every
            # code.
            # A tenant with many fresh vectors (a bulk import draining) has only the codes of the anchors nearest the
            # query read (migration 0021: an inverted file over the codes, shared/storage/anchors.py).
            params[f"{name}_code"] = binary_code(vector)
            shortlist = max(FRESH_SHORTLIST, 4 * int(limit))
            parts.append(
                f"""(SELECT v.memory_id, 1 - ({distance}) AS sim
                     FROM mnemoflow_fresh(NULL, {dim}, :user_id, :model{g},
                                          CAST(:{name}_code AS varbit), {shortlist}{fresh_filter},
                                          p_query => CAST(:{name} AS vector({dim}))) c
                     CROSS JOIN LATERAL (SELECT v.memory_id, v.embedding FROM memory_vectors v
                                         WHERE v.sector = c.sector AND v.memory_id = c.memory_id
                                           AND v.indexed IS NOT TRUE LIMIT 1) v
                     ORDER BY {distance}
                     LIMIT {int(limit)})"""
            )
    return " UNION ALL ".join(parts), params


def _filter_arguments(where: MemoryFilter, params: dict[str, Any], name: str, suffix: str) -> str:
    """`where` as the condition on the memory of row `v` inside `mnemoflow_nearest`'s or `mnemoflow_fresh`'s
    statement, its values their $6 to $11 (in `params` with `suffix`): the arguments after the function's own."""
    clause, values = where.sql("m")
    params |= {f"{key}{suffix}": value for key, value in values.items()}
    filtered = f" AND EXISTS (SELECT 1 FROM memories m WHERE m.id = v.memory_id{clause})" if clause else ""
    return filter_arguments(filtered, params, first=6, name=name, suffix=suffix)


def cosine_branches(
    queries: Mapping[str, SectorVector],
    ladder: Callable[[int], Sequence[int]],
    params: dict[str, Any],
    *,
    prefix: str = "c",
) -> str:
    """SQL `WHEN … THEN` branches giving memory `m` the query's similarity to its primary-sector vector (a
    compressed memory compared with the query pooled to its rung); adds the query vectors to `params`, named with
    `prefix` (a statement holding several of these, or `dense_plan`'s, keeps each one's models and vectors apart)."""
    branches = []
    for g, (query, sectors) in enumerate(group_sectors(queries)):
        model, wanted = f"{prefix}model{g}", f"{prefix}qs{g}"
        params |= {model: query.model, wanted: sectors}
        rungs = query_rungs(query.vector, ladder)
        for dim, vector in rungs.items():
            params[f"{prefix}q{g}_{dim}"] = Vector(vector)
        pooled_query = " ".join(f"WHEN {dim} THEN CAST(:{prefix}q{g}_{dim} AS vector)" for dim in rungs)
        branches.append(
            f"""WHEN m.primary_sector = ANY(CAST(:{wanted} AS text[])) THEN
                       (SELECT 1 - (v.embedding <=> CASE v.dim {pooled_query} END)
                        FROM memory_vectors v
                        WHERE v.memory_id = m.id AND v.sector = m.primary_sector
                          AND v.dim IN ({", ".join(str(d) for d in rungs)}) AND v.model = :{model})"""
        )
    return " ".join(branches)


def period_plan(
    queries: Mapping[str, SectorVector],
    *,
    start: datetime,
    end: datetime,
    where: MemoryFilter,
    limit: int,
    scan_limit: int,
    ladder: Callable[[int], Sequence[int]],
) -> tuple[str, dict[str, Any]]:
    """The tenant's memories that happened in [start, end) (occurred_at, else when stored) and pass `where`,
    most similar to the query first (best `limit`): the period a query names, searched on its own, so time
    anchoring can rank what happened then even when neither the words nor the vector search found it. A
    statement (`id`, `sim`, best first) and its parameters but `user_id`; the read path runs it inside its one
    statement (`storage.candidates`).

    Exact, not approximate: the `scan_limit` latest memories of the period are compared with the query (the
    (user_id, occurred) index gives them in order), so a narrow period ("yesterday") is searched whole and a
    broad one ("2023" in a large store) costs at most `scan_limit` comparisons. Memories without a vector
    of the query's model (a fingerprint) are left out."""
    clause, params = where.sql("m")
    branches = cosine_branches(queries, ladder, params, prefix="p")
    happened = occurred_sql("m")
    params |= {"period_start": start, "period_end": end}
    return (
        f"""
            WITH period AS MATERIALIZED (
                SELECT m.id, m.primary_sector FROM memories m
                WHERE m.user_id = :user_id AND {happened} >= :period_start AND {happened} < :period_end{clause}
                ORDER BY {happened} DESC
                LIMIT {int(scan_limit)}
            ),
            measured AS (SELECT m.id, CASE {branches} END AS sim FROM period m)
            SELECT id, sim FROM measured WHERE sim IS NOT NULL ORDER BY sim DESC, id LIMIT {int(limit)}
            """,
        params,
    )
