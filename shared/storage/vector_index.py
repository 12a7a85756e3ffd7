"""How the vector table is indexed, per dimension in use: one partial HNSW graph over the walked settled rows (an
unfiltered search walks it once), and one over each sector's settled rows (a search of some sectors walks theirs)."""

from __future__ import annotations

from shared.memory.sectors import SECTORS


def vector_index_name(dim: int) -> str:
    return f"memory_vectors_hnsw_{int(dim)}"


def sector_index_name(dim: int, sector: str) -> str:
    return f"memory_vectors_hnsw_{int(dim)}_{known_sector(sector)}"


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
    return _hnsw(sector_index_name(dim, sector), dim, m, ef_construction, f"sector = '{known_sector(sector)}'")


def vector_indexes_ddl(dim: int, m: int, ef_construction: int) -> dict[str, str]:
    """Every HNSW index of the dimension (`vector_index_names`), by name, with its DDL."""
    return {
        vector_index_name(dim): create_vector_index_sql(dim, m, ef_construction),
        **{sector_index_name(dim, s): create_sector_index_sql(dim, s, m, ef_construction) for s in SECTORS},
    }


def _hnsw(name: str, dim: int, m: int, ef_construction: int, rows: str) -> str:
    return (
        f"CREATE INDEX IF NOT EXISTS {name} ON memory_vectors "
        f"USING hnsw ((embedding::vector({int(dim)})) vector_cosine_ops) "
        f"WITH (m = {int(m)}, ef_construction = {int(ef_construction)}) WHERE dim = {int(dim)} AND indexed AND {rows}"
    )


def known_sector(sector: str) -> str:
    """`sector`, checked to be one of SECTORS: it goes into DDL and statements as a literal."""
    if sector not in SECTORS:
        raise ValueError(f"unknown sector {sector!r}")
    return sector
