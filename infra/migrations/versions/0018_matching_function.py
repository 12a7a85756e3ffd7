"""`mnemoflow_matching`: a tenant's memories that match a full-text query, planned for that tenant on every call.

The read path's statement is prepared and runs on a generic plan (shared/storage/search.py, shared/storage/bm25.py),
made once for every tenant from the table's average tenant. On a store of many tenants that plan finds a query's
full-text matches by intersecting the GIN index's match with the tenant's whole `(user_id, ...)` index (a bitmap of
the average tenant's few hundred rows, as estimated): for a tenant of 100,000 memories among 200 of 50 it reads
100,000 index entries for every query, 1.7 ms of the full-text stage's p50 against 0.4 planned for it (the planner's
statistics of `user_id`, its most common values, know the large tenant and read the GIN match alone). Here the match
is planned on each call with the tenant and the query as values, as `mnemoflow_nearest` (migration 0017) plans a
sector's vector search.

Through `memory_text` (migration 0013: the tenant's memories, where the match keeps its GIN index), as the caller's
role (SECURITY INVOKER, the default). `p_limit`: at most that many matches (NULL: all). `p_filter`: the caller's
condition on the memory `m` (`AND ...`, written by shared/storage/bm25.py), whose values it passes as `p_sectors` to
`p_before`, the statement's $4 to $9; a caller may run any statement of its own, so the text it gives runs with no
right it does not have.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27
"""

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


# (name, type, default): the tenant's match, then the filter on each memory and its values
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


def upgrade() -> None:
    arguments = ", ".join(
        f"{name} {kind}" + (f" DEFAULT {default}" if default else "") for name, kind, default in ARGUMENTS
    )
    op.execute(
        f"""
        CREATE FUNCTION mnemoflow_matching({arguments})
        RETURNS TABLE (id uuid, search tsvector)
        LANGUAGE plpgsql STABLE ROWS 100 AS $fn$
        BEGIN
            RETURN QUERY EXECUTE format(
                'SELECT m.id, m.search FROM memory_text m WHERE m.user_id = $1 AND m.search @@ $2%1$s%2$s',
                p_filter, CASE WHEN p_limit IS NULL THEN '' ELSE ' LIMIT $3' END
            ) USING p_user, p_query, p_limit, p_sectors, p_tags, p_start, p_end, p_after, p_before;
        END
        $fn$
        """
    )


def downgrade() -> None:
    op.execute(f"DROP FUNCTION mnemoflow_matching({', '.join(kind for _, kind, _ in ARGUMENTS)})")
