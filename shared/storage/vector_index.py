"""How the vector table is indexed, per dimension in use: one partial HNSW graph over the walked settled rows (an
unfiltered search walks it once), and one over each sector's settled rows (a search of some sectors walks theirs)."""

from __future__ import annotations

from shared.memory.sectors import SECTORS


def vector_index_name(dim: int) -> str:
    return f"memory_vectors_hnsw_{int(dim)}"


def sector_index_name(dim: int, sector: str) -> str:
    return f"memory_vectors_hnsw_{int(dim)}_{_known(sector)}"


def vector_index_names(dim: int) -> list[str]:
    """Every HNSW index of the dimension: the one graph, then each sector's."""
    return [vector_index_name(dim), *(sector_index_name(dim, sector) for sector in SECTORS)]


def create_vector_index_sql(dim: int, m: int, ef_construction: int) -> str:
    """DDL for the HNSW (cosine) index of the vectors of one dimension: each distinct vector of a memory once
    (`walked`, migration 0030), every sector and model in one graph (a query names its model, and its sectors in
    its filter)."""
    return _hnsw(vector_index_name(dim), dim, m, ef_construction, "walked")


def create_sector_index_sql(dim: int, sector: str, m: int, ef_construction: int) -> str:
    """DDL for the HNSW index of one sector's vectors of one dimension (migration 0031): a search restricted to the
    sector walks its graph, not the one graph with a filter (which reads on until it has met enough of the sector's
    memories: 10-70 ms for a sector of a tenant's 8 %, against under 1 ms here)."""
    return _hnsw(sector_index_name(dim, sector), dim, m, ef_construction, f"sector = '{_known(sector)}'")


def index_sql(name: str, dim: int, m: int, ef_construction: int) -> str:
    """The DDL of `name`, one of `vector_index_names(dim)`."""
    if name == vector_index_name(dim):
        return create_vector_index_sql(dim, m, ef_construction)
    return create_sector_index_sql(dim, name.removeprefix(f"{vector_index_name(dim)}_"), m, ef_construction)


def _hnsw(name: str, dim: int, m: int, ef_construction: int, rows: str) -> str:
    return (
        f"CREATE INDEX IF NOT EXISTS {name} ON memory_vectors "
        f"USING hnsw ((embedding::vector({int(dim)})) vector_cosine_ops) "
        f"WITH (m = {int(m)}, ef_construction = {int(ef_construction)}) WHERE dim = {int(dim)} AND indexed AND {rows}"
    )


def _known(sector: str) -> str:
    if sector not in SECTORS:  # it goes into DDL and statements as a literal
        raise ValueError(f"unknown sector {sector!r}")
    return sector
