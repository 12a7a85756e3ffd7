"""Reads beside a bulk import: estimates by settled rows, the fresh tier's first pass per tenant, bounded matches.

A tenant that has just stored 100,000 memories in bulk has its vectors in the fresh tier and its words uncounted
until the merge catches up, minutes later. Measured beside a settled 100,000-memory tenant, its queries took 447 ms
at the median, and the settled tenant's own queries paid for the other's burst too. Three of the read path's
statements were planned for a store at rest:

- `mnemoflow_nearest` (0017) is planned per tenant from the statistics of `user_id`, which count every vector of
  the tenant, settled or fresh. For the new tenant it walked the sector's HNSW index, which holds none of its
  vectors, until `hnsw.max_scan_tuples` (20,000 of the others' vectors): 24-64 ms a sector, 167 ms a query, for
  nothing. Statistics over (`user_id`, `dim`, `indexed`) together (an MCV list) tell the planner how many of a
  tenant's vectors are in the index, and `user_dim` with `indexed` among its columns reads them when they are few
  (0.1 ms). `user_dim`'s other uses (the rungs' probe, a tenant's rows by dimension) read its first two columns.
- The fresh tier's first pass ran on the plan the read path's prepared statement keeps, made for the average
  tenant: with another tenant's burst in `fresh_codes`, a tenant with nothing fresh read the whole table (6 ms a
  query at 108,000 codes). `mnemoflow_fresh` plans it per call, as `mnemoflow_nearest` the settled search, with the
  query's code typed (`varbit`) and the same filter arguments ($6 to $11 of its statement). `p_searched` NULL
  searches every sector: no condition on the sector then (a fifth of the first pass's time at 108,000 codes). Planned
  per call, a large tenant's first pass became a parallel scan: 15.5 against 17.9 ms at 108,000 codes on an idle
  machine, 21.9 against 18.0 with two other busy processes, what a query meets while a burst is merged; so no
  parallel workers inside it.
- `mnemoflow_matching` (0018) reads at most `p_limit` matches when every query word is common (shared/storage/bm25.py).
  Under a `LIMIT` the planner may scan the table in its order and stop after enough matches, which for a tenant
  whose rows come after another's read 120,000 rows (61 ms against 24 unbounded); bounded, the match is now planned
  as if read whole (the GIN index), and only then cut. (Its words uncounted until the merge, the importer's every
  word looked rare: migration 0020 counts a memory when it is stored.)

Per sector partition, as 0005 made `user_dim`; the statistics are gathered at once, and by autovacuum and the
merge's `ANALYZE` (every 5,000 merged rows) after. The functions run as the caller (SECURITY INVOKER, the default):
row-level security applies inside them as to any statement of the caller's role.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-27
"""

from alembic import op

from shared.memory.sectors import SECTORS

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

# (name, type, default) as 0018 has them
ARGUMENTS = (
    ("p_user", "text", None),
    ("p_query", "tsquery", None),
    ("p_limit", "integer", None),
    ("p_filter", "text", "''"),
    ("p_sectors", "text[]", "NULL"),
    ("p_tags", "text[]", "NULL"),
    ("p_start", "timestamptz", "NULL"),
    ("p_end", "timestamptz", "NULL"),
    ("p_after", "timestamptz", "NULL"),
    ("p_before", "timestamptz", "NULL"),
)
USING = "p_user, p_query, p_limit, p_sectors, p_tags, p_start, p_end, p_after, p_before"


def _matching(statement: str) -> None:
    arguments = ", ".join(
        f"{name} {kind}" + (f" DEFAULT {default}" if default else "") for name, kind, default in ARGUMENTS
    )
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION mnemoflow_matching({arguments})
        RETURNS TABLE (id uuid, search tsvector)
        LANGUAGE plpgsql STABLE ROWS 100 AS $fn$
        BEGIN
            RETURN QUERY EXECUTE {statement} USING {USING};
        END
        $fn$
        """
    )


# `mnemoflow_fresh`'s own arguments, then the filter's as `mnemoflow_nearest` (0017) has them: the statement's $6 to $11
FRESH_ARGUMENTS = (
    ("p_searched", "text[]", None),
    ("p_dim", "integer", None),
    ("p_user", "text", None),
    ("p_model", "text", None),
    ("p_code", "varbit", None),
    ("p_limit", "integer", None),
    *ARGUMENTS[3:],
)


def upgrade() -> None:
    arguments = ", ".join(
        f"{name} {kind}" + (f" DEFAULT {default}" if default else "") for name, kind, default in FRESH_ARGUMENTS
    )
    op.execute(
        f"""
        CREATE FUNCTION mnemoflow_fresh({arguments})
        RETURNS TABLE (sector text, memory_id uuid)
        LANGUAGE plpgsql STABLE ROWS 400 SET max_parallel_workers_per_gather = 0 AS $fn$
        BEGIN
            RETURN QUERY EXECUTE format(
                'SELECT v.sector, v.memory_id FROM fresh_codes v '
                'WHERE %3$sv.dim = %1$s AND v.user_id = $2 AND v.model = $3%2$s '
                'ORDER BY v.code <~> $4 LIMIT $5',
                p_dim, p_filter, CASE WHEN p_searched IS NULL THEN '' ELSE 'v.sector = ANY($1) AND ' END
            ) USING p_searched, p_user, p_model, p_code, p_limit, p_sectors, p_tags, p_start, p_end, p_after, p_before;
        END
        $fn$
        """
    )
    for sector in SECTORS:
        table = f"memory_vectors_{sector}"
        op.execute(f"DROP INDEX {table}_user_dim")
        op.execute(f"CREATE INDEX {table}_user_dim ON {table} (user_id, dim, indexed)")
        op.execute(f"CREATE STATISTICS {table}_settled (mcv) ON user_id, dim, indexed FROM {table}")
        op.execute(f"ANALYZE {table}")
    # bounded, the match is planned as if read whole (a MATERIALIZED CTE is planned for all its rows), then cut
    _matching(
        "CASE WHEN p_limit IS NULL THEN format('SELECT m.id, m.search FROM memory_text m "
        "WHERE m.user_id = $1 AND m.search @@ $2%s', p_filter) "
        "ELSE format('WITH matched AS MATERIALIZED (SELECT m.id, m.search FROM memory_text m "
        "WHERE m.user_id = $1 AND m.search @@ $2%s) SELECT matched.id, matched.search FROM matched LIMIT $3', "
        "p_filter) END"
    )


def downgrade() -> None:
    op.execute(f"DROP FUNCTION mnemoflow_fresh({', '.join(kind for _, kind, _ in FRESH_ARGUMENTS)})")
    _matching(
        "format('SELECT m.id, m.search FROM memory_text m WHERE m.user_id = $1 AND m.search @@ $2%1$s%2$s', "
        "p_filter, CASE WHEN p_limit IS NULL THEN '' ELSE ' LIMIT $3' END)"
    )
    for sector in SECTORS:
        table = f"memory_vectors_{sector}"
        op.execute(f"DROP STATISTICS {table}_settled")
        op.execute(f"DROP INDEX {table}_user_dim")
        op.execute(f"CREATE INDEX {table}_user_dim ON {table} (user_id, dim)")
