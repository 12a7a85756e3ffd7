"""How the vector table is indexed: one partial HNSW graph per dimension in use, over the walked settled rows."""

from __future__ import annotations


def vector_index_name(dim: int) -> str:
    return f"memory_vectors_hnsw_{int(dim)}"


def create_vector_index_sql(dim: int, m: int, ef_construction: int) -> str:
    """DDL for the HNSW (cosine) index of the vectors of one dimension: each distinct vector of a memory once
    (`walked`, migration 0030), every sector and model in one graph (a query names its model, and its sectors in
    its filter)."""
    return (
        f"CREATE INDEX IF NOT EXISTS {vector_index_name(dim)} ON memory_vectors "
        f"USING hnsw ((embedding::vector({int(dim)})) vector_cosine_ops) "
        f"WITH (m = {int(m)}, ef_construction = {int(ef_construction)}) WHERE dim = {int(dim)} AND indexed AND walked"
    )
