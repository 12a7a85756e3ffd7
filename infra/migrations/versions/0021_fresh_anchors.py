"""Anchors for the fresh tier's first pass: a tenant with many fresh vectors has only the query's nearest lists read.

While a bulk import drains into the HNSW indexes, every query of its tenant ranked all of the tenant's fresh codes
(migration 0016) by Hamming distance: ~0.4 µs a code, 40-60 ms a query with 85,000 waiting, against 17 ms for the
whole statement once they settled (docs/experiments.md, "Where the drain's queries go"). Here each fresh vector's
code is assigned, as it is written, to the nearest of the anchors of its model and dimension (an inverted file: the
anchors are centroids of the fresh vectors, by cosine distance); a query of a tenant with at least `CROWD` fresh
codes of the dimension reads the codes of the `PROBES` anchors nearest the query vector, and those not assigned
yet, and ranks them as before. A tenant with fewer has every code read: exact below the shortlist, as before.

- `fresh_anchors`: the anchors, per (model, dimension), trained by the merge cycle (shared/storage/anchors.py,
  spherical k-means over a sample of the fresh vectors) once some model's fresh codes of a dimension first number
  `CROWD`, then kept: every assignment refers to them. A store-wide table (no tenant column, like an index's own
  pages): the app role reads it (its triggers and queries), the maintenance role writes it.
- `fresh_codes.anchor`: the nearest anchor, set by the triggers as the code is written (NULL where its model and
  dimension have no anchors yet: the merge cycle assigns those after training them). NULL codes are read by every
  query, so a code is found whatever its state. Finding the nearest of 128 anchors costs a vector written ~40 µs.
- `mnemoflow_fresh` takes the query vector (`p_query`, last: without it every code is read), to find its anchors.
- `fresh_codes_user` gains the anchor: (user_id, dim, anchor), whose first two columns serve what it served.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28
"""

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

APP = "mnemoflow_app"
MAINTENANCE = "mnemoflow_maintenance"
CROWD = 10_000  # a tenant's fresh codes of one dimension from which a query reads its nearest anchors' lists only
PROBES = 24  # anchors whose codes a query reads, of shared/storage/anchors.py's 128 (about a fifth of the codes)

NEAREST = (
    "(SELECT f.anchor FROM fresh_anchors f WHERE f.model = {model} AND f.dim = {dim} "
    "ORDER BY f.centroid <=> {vector} LIMIT 1)"
)
CODE_COLUMNS = "sector, memory_id, user_id, dim, model, code, anchor"
UPSERT = (
    "ON CONFLICT (sector, memory_id) DO UPDATE SET user_id = excluded.user_id, dim = excluded.dim, "
    "model = excluded.model, code = excluded.code, anchor = excluded.anchor"
)
# (name, type, default) of `mnemoflow_fresh` (0019): its own arguments, then the filter's, the statement's $6 to $11
FRESH_ARGUMENTS = (
    ("p_searched", "text[]", None),
    ("p_dim", "integer", None),
    ("p_user", "text", None),
    ("p_model", "text", None),
    ("p_code", "varbit", None),
    ("p_limit", "integer", None),
    ("p_filter", "text", "''"),
    ("p_sectors", "text[]", "NULL"),
    ("p_tags", "text[]", "NULL"),
    ("p_start", "timestamptz", "NULL"),
    ("p_end", "timestamptz", "NULL"),
    ("p_after", "timestamptz", "NULL"),
    ("p_before", "timestamptz", "NULL"),
)
FRESH_USING = "p_searched, p_user, p_model, p_code, p_limit, p_sectors, p_tags, p_start, p_end, p_after, p_before"


def _triggers(*, anchored: bool) -> None:
    columns = CODE_COLUMNS if anchored else CODE_COLUMNS.removesuffix(", anchor")
    upsert = UPSERT if anchored else UPSERT.removesuffix(", anchor = excluded.anchor")
    added = ", " + NEAREST.format(model="a.model", dim="a.dim", vector="a.embedding") if anchored else ""
    changed = ", " + NEAREST.format(model="NEW.model", dim="NEW.dim", vector="NEW.embedding") if anchored else ""
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION mnemoflow_fresh_codes_added() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO fresh_codes ({columns})
            SELECT a.sector, a.memory_id, a.user_id, a.dim, a.model, c.code{added}
            FROM added a CROSS JOIN LATERAL (SELECT binary_quantize(a.embedding)::varbit AS code) c
            WHERE NOT a.indexed
            {upsert};
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION mnemoflow_fresh_codes_changed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.indexed THEN
                DELETE FROM fresh_codes WHERE sector = OLD.sector AND memory_id = OLD.memory_id;
            ELSE
                INSERT INTO fresh_codes ({columns})
                SELECT NEW.sector, NEW.memory_id, NEW.user_id, NEW.dim, NEW.model, c.code{changed}
                FROM (SELECT binary_quantize(NEW.embedding)::varbit AS code) c
                {upsert};
            END IF;
            RETURN NULL;
        END $$
        """
    )


def _signature(*, anchored: bool) -> tuple[tuple[str, str, str | None], ...]:
    return FRESH_ARGUMENTS + ((("p_query", "vector", "NULL"),) if anchored else ())


def _fresh(*, anchored: bool) -> None:
    arguments = ", ".join(
        f"{name} {kind}" + (f" DEFAULT {default}" if default else "")
        for name, kind, default in _signature(anchored=anchored)
    )
    searched = "CASE WHEN p_searched IS NULL THEN '' ELSE 'v.sector = ANY($1) AND ' END"
    if not anchored:
        body = f"""
            RETURN QUERY EXECUTE format(
                'SELECT v.sector, v.memory_id FROM fresh_codes v '
                'WHERE %3$sv.dim = %1$s AND v.user_id = $2 AND v.model = $3%2$s '
                'ORDER BY v.code <~> $4 LIMIT $5',
                p_dim, p_filter, {searched}
            ) USING {FRESH_USING};"""
        declare = ""
    else:
        # A crowded tenant reads the codes of the anchors nearest the query (and those not assigned yet). Whether it
        # is crowded is counted up to CROWD (1-3 ms for a crowded one), in a statement planned for the tenant on each
        # call: on a plan kept for the average tenant (plpgsql keeps one for a static statement), a tenant with
        # nothing fresh would read another tenant's burst whole. Only where the model has anchors: a store that
        # never held CROWD fresh codes pays one probe of their key, not a count planned on every query.
        declare = "DECLARE probed smallint[]; crowd bigint;"
        body = f"""
            IF p_query IS NOT NULL
               AND EXISTS (SELECT 1 FROM fresh_anchors f WHERE f.model = p_model AND f.dim = p_dim) THEN
                EXECUTE 'SELECT count(*) FROM (SELECT 1 FROM fresh_codes c WHERE c.user_id = $1 AND c.dim = $2 '
                        'LIMIT {CROWD}) crowd' INTO crowd USING p_user, p_dim;
            END IF;
            IF crowd >= {CROWD} THEN
                probed := ARRAY(SELECT f.anchor FROM fresh_anchors f WHERE f.model = p_model AND f.dim = p_dim
                                ORDER BY f.centroid <=> p_query LIMIT {PROBES});
            END IF;
            RETURN QUERY EXECUTE format(
                'SELECT v.sector, v.memory_id FROM fresh_codes v '
                'WHERE %3$sv.dim = %1$s AND v.user_id = $2 AND v.model = $3%4$s%2$s '
                'ORDER BY v.code <~> $4 LIMIT $5',
                p_dim, p_filter, {searched},
                CASE WHEN cardinality(probed) > 0 THEN ' AND (v.anchor = ANY($12) OR v.anchor IS NULL)' ELSE '' END
            ) USING {FRESH_USING}, probed;"""
    op.execute(
        f"""
        CREATE FUNCTION mnemoflow_fresh({arguments})
        RETURNS TABLE (sector text, memory_id uuid)
        LANGUAGE plpgsql STABLE ROWS 400 SET max_parallel_workers_per_gather = 0 AS $fn$
        {declare}
        BEGIN{body}
        END
        $fn$
        """
    )


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE fresh_anchors (
            model text NOT NULL,
            dim smallint NOT NULL,
            anchor smallint NOT NULL,
            centroid vector NOT NULL,
            PRIMARY KEY (model, dim, anchor)
        )
        """
    )
    op.execute(f"GRANT SELECT ON fresh_anchors TO {APP}")
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON fresh_anchors TO {MAINTENANCE}")
    op.execute("ALTER TABLE fresh_codes ADD COLUMN anchor smallint")
    op.execute("DROP INDEX fresh_codes_user")
    op.execute("CREATE INDEX fresh_codes_user ON fresh_codes (user_id, dim, anchor)")
    _triggers(anchored=True)
    _drop_fresh(anchored=False)
    _fresh(anchored=True)


def _drop_fresh(*, anchored: bool) -> None:
    op.execute(f"DROP FUNCTION mnemoflow_fresh({', '.join(kind for _, kind, _ in _signature(anchored=anchored))})")


def downgrade() -> None:
    _drop_fresh(anchored=True)
    _fresh(anchored=False)
    _triggers(anchored=False)
    op.execute("DROP INDEX fresh_codes_user")
    op.execute("CREATE INDEX fresh_codes_user ON fresh_codes (user_id, dim)")
    op.execute("ALTER TABLE fresh_codes DROP COLUMN anchor")
    op.execute("DROP TABLE fresh_anchors")
