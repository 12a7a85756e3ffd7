"""`mnemoflow_nearest`: a tenant's nearest vectors in one sector, planned for that tenant on every call.

The read path's statement is prepared and runs on a generic plan (shared/storage/search.py), made once for every
tenant from the table's average tenant. Where a tenant's vectors are searched is the choice that average gets wrong:
a tenant holding a small share of a sector's shared HNSW index is found faster by reading its own rows through the
(user_id, dim) index and comparing them (the HNSW walk skips every other tenant's vectors until it has enough, and
gives up at `hnsw.max_scan_tuples`), a large one through the index; on a store of a few large tenants the generic
plan walks the index for everyone (a 2,000-memory tenant beside a 100,000-memory one: 15-19 ms a sector against 1),
and on a store of many small ones it reads every row of everyone (the 100,000-memory tenant: 60 ms a sector against
0.6). Here the statement is planned on each call with the tenant, sector, dimension and limit as values, so the
planner's statistics of `user_id` (its most common values: the large tenants) choose per tenant, for a fraction of
a millisecond of planning.

Through the parent table, so partition pruning and the tenant's row-level security apply as to any statement of the
caller's role (SECURITY INVOKER, the default). `p_dim` goes into the text as an integer: the cast must match the
HNSW index's expression, `embedding::vector(p_dim)`, and its partial predicate `dim = p_dim AND indexed`.
`p_filter`: the caller's condition on the memory of row `v` (`AND ...`, shared/storage/search.py writes it), whose
values it passes as `p_sectors` to `p_before`, the statement's $6 to $11; a caller may run any statement of its own,
so the text it gives runs with no right it does not have.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27
"""

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


# (name, type, default): the tenant's search, then the filter on each row's memory and its values
ARGUMENTS = (
    ("p_sector", "text", None),
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
)


def upgrade() -> None:
    arguments = ", ".join(
        f"{name} {kind}" + (f" DEFAULT {default}" if default else "") for name, kind, default in ARGUMENTS
    )
    op.execute(
        f"""
        CREATE FUNCTION mnemoflow_nearest({arguments})
        RETURNS TABLE (memory_id uuid, sim double precision)
        LANGUAGE plpgsql STABLE ROWS 32 AS $fn$
        BEGIN
            RETURN QUERY EXECUTE format(
                'SELECT v.memory_id, 1 - (v.embedding::vector(%1$s) <=> $1::vector(%1$s)) '
                'FROM memory_vectors v '
                'WHERE v.sector = $2 AND v.dim = %1$s AND v.indexed AND v.user_id = $3 AND v.model = $4%2$s '
                'ORDER BY v.embedding::vector(%1$s) <=> $1::vector(%1$s) LIMIT $5',
                p_dim, p_filter
            ) USING p_query, p_sector, p_user, p_model, p_limit, p_sectors, p_tags, p_start, p_end, p_after, p_before;
        END
        $fn$
        """
    )


def downgrade() -> None:
    op.execute(f"DROP FUNCTION mnemoflow_nearest({', '.join(kind for _, kind, _ in ARGUMENTS)})")
