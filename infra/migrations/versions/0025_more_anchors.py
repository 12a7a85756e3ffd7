"""256 anchors a generation, 32 of them read: a crowded tenant's first pass reads a third fewer codes.

With 128 anchors a crowded tenant's query read the codes of the 24 nearest the query (about a fifth of them);
with 256, the 32 nearest hold about 15 % of the codes for the same share of the exact nearest found
(`python -m bench.anchors --anchors 256 --probes 32`: 15.5 % / 14.2 % of the codes read, 0.990 / 0.958 of the
exact ten found on LoCoMo / SciFact, against 22.0 % / 20.8 % and 0.990 / 0.956; docs/experiments.md). Twice the
anchors cost the triggers twice the comparisons (~40 µs a vector in SQL at 128), which is why this waited for the
engine's writer to file its own codes in numpy (migration 0024). `shared/storage/anchors.py` trains 256 from now
on; a store's generation of 128 stays until its next training, with 32 of them read.

Only `mnemoflow_fresh` changes (the number of anchors read); its signature is 0021's.

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-29
"""

from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

CROWD = 10_000  # as in 0021
SIGNATURE = (
    "p_searched text[], p_dim integer, p_user text, p_model text, p_code varbit, p_limit integer, "
    "p_filter text DEFAULT '', p_sectors text[] DEFAULT NULL, p_tags text[] DEFAULT NULL, "
    "p_start timestamptz DEFAULT NULL, p_end timestamptz DEFAULT NULL, p_after timestamptz DEFAULT NULL, "
    "p_before timestamptz DEFAULT NULL, p_query vector DEFAULT NULL"
)
USING = "p_searched, p_user, p_model, p_code, p_limit, p_sectors, p_tags, p_start, p_end, p_after, p_before"
SEARCHED = "CASE WHEN p_searched IS NULL THEN '' ELSE 'v.sector = ANY($1) AND ' END"


def _fresh(probes: int) -> None:
    """`mnemoflow_fresh` as 0022 made it, reading the codes of the `probes` anchors nearest the query."""
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION mnemoflow_fresh({SIGNATURE})
        RETURNS TABLE (sector text, memory_id uuid)
        LANGUAGE plpgsql STABLE ROWS 400 SET max_parallel_workers_per_gather = 0 AS $fn$
        DECLARE probed smallint[]; crowd bigint; lo smallint; hi smallint;
        BEGIN
            IF p_query IS NOT NULL
               AND EXISTS (SELECT 1 FROM fresh_anchors f WHERE f.model = p_model AND f.dim = p_dim) THEN
                EXECUTE 'SELECT count(*) FROM (SELECT 1 FROM fresh_codes c WHERE c.user_id = $1 AND c.dim = $2 '
                        'LIMIT {CROWD}) crowd' INTO crowd USING p_user, p_dim;
            END IF;
            IF crowd >= {CROWD} THEN
                probed := ARRAY(SELECT f.anchor FROM fresh_anchors f WHERE f.model = p_model AND f.dim = p_dim
                                ORDER BY f.centroid <=> p_query LIMIT {probes});
                SELECT min(f.anchor), max(f.anchor) INTO lo, hi FROM fresh_anchors f
                WHERE f.model = p_model AND f.dim = p_dim;
            END IF;
            RETURN QUERY EXECUTE format(
                'SELECT v.sector, v.memory_id FROM fresh_codes v '
                'WHERE %3$sv.dim = %1$s AND v.user_id = $2 AND v.model = $3%4$s%2$s '
                'ORDER BY v.code <~> $4 LIMIT $5',
                p_dim, p_filter, {SEARCHED},
                CASE WHEN cardinality(probed) > 0
                     THEN ' AND (v.anchor = ANY($12) OR v.anchor IS NULL OR v.anchor < $13 OR v.anchor > $14)'
                     ELSE '' END
            ) USING {USING}, probed, lo, hi;
        END
        $fn$
        """
    )


def upgrade() -> None:
    _fresh(32)


def downgrade() -> None:
    _fresh(24)
