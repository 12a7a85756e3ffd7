"""A graph per sector beside the one graph: a search of some sectors walks theirs.

With one graph for every sector (0030) a search restricted to a sector walked it with the memory's sectors as a
filter, and pgvector's iterative scan reads on until it has met enough of that sector: at 100k, 10-70 ms for a
sector of 8 % of the tenant (p50 / p95), 2-22 ms for one of 66 %, against under 1 ms walking the sector's own rows
(the partitions' graphs before 0030). So each dimension in use gets, beside its one graph, a partial HNSW index per
sector over that sector's settled rows (`WHERE dim = N AND indexed AND sector = 'S'`, walked or not), and
`mnemoflow_nearest` given some sectors walks each of theirs (a literal in its statement, so the planner may use the
index; for a tenant with few rows of it the planner reads them instead, planned per call as before) and keeps each
memory's best. The tenant's count of the sectors' rows (0030's bound for an exact comparison) is no longer read.

The merge inserts a vector into two graphs, its dimension's and its sector's: measured in docs/benchmarks.md. The
migration builds the sector graphs over the vectors a store has: about the time of one more HNSW build (22 s for
108,000 vectors here).

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

from shared.config import get_settings
from shared.memory.sectors import SECTORS

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None

# 0030's arguments
ARGUMENTS = (
    ("p_dim", "integer", None),
    ("p_user", "text", None),
    ("p_model", "text", None),
    ("p_query", "vector", None),
    ("p_limit", "integer", None),
    ("p_filter", "text", "''"),
    ("p_sectors", "text[]", "NULL"),
    ("p_tags", "text[]", "NULL"),
    ("p_start", "timestamptz", "NULL"),
    ("p_end", "timestamptz", "NULL"),
    ("p_after", "timestamptz", "NULL"),
    ("p_before", "timestamptz", "NULL"),
    ("p_within", "text[]", "NULL"),
)
USING = "p_query, p_dim, p_user, p_model, p_limit, p_sectors, p_tags, p_start, p_end, p_after, p_before"
# one walk, as string constants to follow another (each on a line: PostgreSQL joins them so): %1$s the dimension,
# %2$s the filter, %3$s which rows
WALK = """
    'FROM memory_vectors v '
    'WHERE %3$s AND v.dim = %1$s AND v.indexed AND v.user_id = $3 AND v.model = $4%2$s '
    'ORDER BY v.embedding::vector(%1$s) <=> $1::vector(%1$s) LIMIT $5'"""
FEW = 20_000  # 0030's


def _signature() -> str:
    return ", ".join(f"{name} {kind}" + (f" DEFAULT {default}" if default else "") for name, kind, default in ARGUMENTS)


def _nearest(body: str, declare: str = "") -> None:
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION mnemoflow_nearest({_signature()})
        RETURNS TABLE (memory_id uuid, sim double precision)
        LANGUAGE plpgsql STABLE ROWS 32 AS $fn$
        {declare}
        BEGIN{body}
        END
        $fn$
        """
    )


def _index_name(dim: int, sector: str) -> str:
    return f"memory_vectors_hnsw_{dim}_{sector}"


def _dims() -> list[int]:
    present = op.get_bind().execute(sa.text("SELECT DISTINCT dim FROM memory_vectors")).scalars()
    return sorted({get_settings().vector_dim or 384, *map(int, present)})


def upgrade() -> None:
    # Every sector: the one graph. Some (`p_within`): each sector's walk (its graph, or its few rows of the tenant),
    # a memory found in two of them once, by its best. $2 is unused (the filter's values stay $6 to $11).
    _nearest(
        f"""
            IF p_within IS NULL THEN
                RETURN QUERY EXECUTE format(
                    'SELECT v.memory_id, 1 - (v.embedding::vector(%1$s) <=> $1::vector(%1$s)) ' {WALK},
                    p_dim, p_filter, 'v.walked'
                ) USING {USING};
                RETURN;
            END IF;
            SELECT string_agg(format(
                       '(SELECT v.memory_id, v.embedding::vector(%1$s) <=> $1::vector(%1$s) AS distance ' {WALK}
                       ')',
                       p_dim, p_filter, format('v.sector = %L', w.sector)
                   ), ' UNION ALL ')
            INTO walks FROM (SELECT DISTINCT unnest(p_within) AS sector) w;
            IF walks IS NULL THEN
                RETURN;
            END IF;
            RETURN QUERY EXECUTE format(
                'SELECT w.memory_id, 1 - min(w.distance) FROM (%s) w GROUP BY w.memory_id ORDER BY min(w.distance) '
                'LIMIT $5', walks
            ) USING {USING};""",
        "DECLARE walks text;",
    )
    settings = get_settings()
    for dim in _dims():
        for sector in SECTORS:
            op.execute(
                f"CREATE INDEX IF NOT EXISTS {_index_name(dim, sector)} ON memory_vectors "
                f"USING hnsw ((embedding::vector({dim})) vector_cosine_ops) "
                f"WITH (m = {int(settings.hnsw_m)}, ef_construction = {int(settings.hnsw_ef_construction)}) "
                f"WHERE dim = {dim} AND indexed AND sector = '{sector}'"
            )
    op.execute("ANALYZE memory_vectors")


def downgrade() -> None:
    names = op.get_bind().execute(
        sa.text("SELECT indexname FROM pg_indexes WHERE tablename = 'memory_vectors' AND indexname ~ :pattern"),
        {"pattern": f"^memory_vectors_hnsw_[0-9]+_({'|'.join(SECTORS)})$"},
    )
    for name in names.scalars().all():
        op.execute(f"DROP INDEX {name}")
    _nearest(  # 0030's
        f"""
            IF p_within IS NOT NULL THEN
                EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM memory_vectors v WHERE v.user_id = $1 '
                               'AND v.sector = ANY($2) AND v.dim = %1$s AND v.indexed LIMIT {FEW}) few', p_dim)
                    INTO within_rows USING p_user, p_within;
            END IF;
            RETURN QUERY EXECUTE format(
                'SELECT v.memory_id, 1 - (v.embedding::vector(%1$s) <=> $1::vector(%1$s)) '
                'FROM memory_vectors v '
                'WHERE %3$s AND v.dim = %1$s AND v.indexed AND v.user_id = $3 AND v.model = $4%2$s '
                'ORDER BY v.embedding::vector(%1$s) <=> $1::vector(%1$s) LIMIT $5',
                p_dim, p_filter,
                CASE WHEN p_within IS NULL THEN 'v.walked'
                     WHEN within_rows < {FEW} THEN 'v.sector = ANY($12)'
                     ELSE 'v.walked AND EXISTS (SELECT 1 FROM memories s WHERE s.id = v.memory_id '
                          'AND s.sectors && $12)' END
            ) USING {USING}, p_within;""",
        "DECLARE within_rows bigint;",
    )
