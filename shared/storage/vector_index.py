"""How per-sector vector partitions are indexed: one partial HNSW index per dimension in use."""

from __future__ import annotations

from shared.memory.sectors import SECTORS


def vector_index_name(sector: str, dim: int) -> str:
    return f"memory_vectors_{sector}_hnsw_{dim}"


def create_vector_index_sql(sector: str, dim: int, m: int, ef_construction: int) -> str:
    """DDL for the HNSW (cosine) index over one sector partition at one dimension."""
    if sector not in SECTORS:
        raise ValueError(f"unknown sector {sector!r}")
    return (
        f"CREATE INDEX IF NOT EXISTS {vector_index_name(sector, dim)} ON memory_vectors_{sector} "
        f"USING hnsw ((embedding::vector({int(dim)})) vector_cosine_ops) "
        f"WITH (m = {int(m)}, ef_construction = {int(ef_construction)}) WHERE dim = {int(dim)} AND indexed"
    )
