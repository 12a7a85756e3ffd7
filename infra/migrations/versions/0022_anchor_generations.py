"""Anchors retrained when the fresh tier has drifted from them: generations of anchors, and stale codes still read.

Migration 0021's anchors were trained once per model and dimension and kept: a store whose fresh vectors later
looked nothing like the sample they were trained on (another tenant's import, another domain) filed its codes
under a few of them, and a crowded tenant's queries read those few long lists. The merge cycle now trains them
again when the crowded fresh tier has drifted (shared/storage/anchors.py), so each training is a generation:

- `fresh_anchors.share`: the fraction of the training sample nearest each anchor, what the drift is measured
  against (NULL for 0021's anchors: taken as even).
- A generation's anchors are numbered `base` to `base + 127`, each generation's `base` the next multiple of 128
  (cycling through smallint's range): a code filed under an anchor of an earlier generation (a writer whose
  statement saw the old anchors while they were replaced) is recognisable as stale.
- `mnemoflow_fresh` reads a crowded tenant's codes of the anchors nearest the query, those not filed yet, and now
  those filed under another generation's anchors: until the merge cycle files them again, a code is found whatever
  its state, as before.
- The maintenance role may vacuum and analyse `fresh_codes` (PostgreSQL 17's MAINTAIN, as 0013 gave it the vector
  partitions): filing a crowd of codes at once leaves as many dead index entries, and statistics that still say
  "nothing filed", and the first pass read twice the pages (14.5 ms against 10.6 at 100,000 codes) or, planned on
  those statistics, every code, until autovacuum came by.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-28
"""

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

MAINTENANCE = "mnemoflow_maintenance"
CROWD = 10_000  # as in 0021
PROBES = 24  # as in 0021

# `mnemoflow_fresh`'s signature (0021), unchanged: its own arguments, the filter's ($6 to $11), then the query vector
SIGNATURE = (
    "p_searched text[], p_dim integer, p_user text, p_model text, p_code varbit, p_limit integer, "
    "p_filter text DEFAULT '', p_sectors text[] DEFAULT NULL, p_tags text[] DEFAULT NULL, "
    "p_start timestamptz DEFAULT NULL, p_end timestamptz DEFAULT NULL, p_after timestamptz DEFAULT NULL, "
    "p_before timestamptz DEFAULT NULL, p_query vector DEFAULT NULL"
)
USING = "p_searched, p_user, p_model, p_code, p_limit, p_sectors, p_tags, p_start, p_end, p_after, p_before"
SEARCHED = "CASE WHEN p_searched IS NULL THEN '' ELSE 'v.sector = ANY($1) AND ' END"


def _fresh(*, generations: bool) -> None:
    """`mnemoflow_fresh` as 0021 made it, and with generations: a crowded tenant also reads the codes filed under
    an anchor outside the current generation's range ($13 to $14)."""
    declare = "DECLARE probed smallint[]; crowd bigint;" + (" lo smallint; hi smallint;" if generations else "")
    ranged = (
        "SELECT min(f.anchor), max(f.anchor) INTO lo, hi FROM fresh_anchors f "
        "WHERE f.model = p_model AND f.dim = p_dim;"
    )
    condition = (
        "' AND (v.anchor = ANY($12) OR v.anchor IS NULL OR v.anchor < $13 OR v.anchor > $14)'"
        if generations
        else "' AND (v.anchor = ANY($12) OR v.anchor IS NULL)'"
    )
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION mnemoflow_fresh({SIGNATURE})
        RETURNS TABLE (sector text, memory_id uuid)
        LANGUAGE plpgsql STABLE ROWS 400 SET max_parallel_workers_per_gather = 0 AS $fn$
        {declare}
        BEGIN
            IF p_query IS NOT NULL
               AND EXISTS (SELECT 1 FROM fresh_anchors f WHERE f.model = p_model AND f.dim = p_dim) THEN
                EXECUTE 'SELECT count(*) FROM (SELECT 1 FROM fresh_codes c WHERE c.user_id = $1 AND c.dim = $2 '
                        'LIMIT {CROWD}) crowd' INTO crowd USING p_user, p_dim;
            END IF;
            IF crowd >= {CROWD} THEN
                probed := ARRAY(SELECT f.anchor FROM fresh_anchors f WHERE f.model = p_model AND f.dim = p_dim
                                ORDER BY f.centroid <=> p_query LIMIT {PROBES});
                {ranged if generations else ""}
            END IF;
            RETURN QUERY EXECUTE format(
                'SELECT v.sector, v.memory_id FROM fresh_codes v '
                'WHERE %3$sv.dim = %1$s AND v.user_id = $2 AND v.model = $3%4$s%2$s '
                'ORDER BY v.code <~> $4 LIMIT $5',
                p_dim, p_filter, {SEARCHED},
                CASE WHEN cardinality(probed) > 0 THEN {condition} ELSE '' END
            ) USING {USING}, probed{", lo, hi" if generations else ""};
        END
        $fn$
        """
    )


def _maintain(grant: bool) -> None:
    statement = "GRANT MAINTAIN ON fresh_codes TO" if grant else "REVOKE MAINTAIN ON fresh_codes FROM"
    op.execute(
        f"""
        DO $$
        BEGIN
            IF current_setting('server_version_num')::int >= 170000 THEN
                EXECUTE '{statement} {MAINTENANCE}';
            END IF;
        END $$
        """
    )


def upgrade() -> None:
    op.execute("ALTER TABLE fresh_anchors ADD COLUMN share real")
    _fresh(generations=True)
    _maintain(grant=True)


def downgrade() -> None:
    _maintain(grant=False)
    _fresh(generations=False)
    op.execute("ALTER TABLE fresh_anchors DROP COLUMN share")
