"""One vector table, one HNSW graph per dimension: vectors are no longer partitioned by sector.

With a partition per sector a query walked one HNSW graph per populated sector (four walks and five plannings at
100k), and in simple mode a memory of three sectors sat in three graphs with one and the same vector. Now
`memory_vectors` is one table, the sector a column, and each distinct vector of a memory is walked once: `walked`
marks one row per (memory, model, vector), the memory's primary sector first; the others keep their rows (a sector's
vector is still looked up by its sector, re-embedded and compressed by sector) but not a place in the graph. The
HNSW index, one per dimension in use, covers the walked settled rows (`WHERE dim = N AND indexed AND walked`): made
here for the dimensions the store has (and the default one, as 0001 did), by the processes at start-up for a new
model's rungs (shared/storage/sector_models.py).

The fresh tier keeps the code of walked rows only (the triggers below, and the writer in shared/storage/vectors.py),
so its first pass ranks each vector once; a query restricted to some sectors says so by the memory's `sectors` in
its filter. `mnemoflow_nearest` loses its sector: one call per model and dimension; given some sectors, it compares
the tenant's rows of them exactly where they are few (a rare sector walked to through the graph is slow).

Rows are copied from the partitions into the new table (a store made by the code before keeps every vector, its
place in the fresh tier and its code), so the migration takes the time of a copy and of building the graphs. The
downgrade goes back to the partitions (their graphs made at the next start).

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

from shared.config import get_settings
from shared.memory.sectors import SECTORS

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None

APP = "mnemoflow_app"
MAINTENANCE = "mnemoflow_maintenance"
TENANT = "(SELECT NULLIF(current_setting('mnemoflow.user_id', true), ''))"  # as 0013
SECTOR_LIST = ", ".join(f"'{sector}'" for sector in SECTORS)
COLUMNS = "memory_id, sector, user_id, dim, model, indexed, embedding, created_at"
CODE_COLUMNS = "sector, memory_id, user_id, dim, model, code, anchor"
NEAREST_ANCHOR = (
    "(SELECT f.anchor FROM fresh_anchors f WHERE f.model = {model} AND f.dim = {dim} "
    "ORDER BY f.centroid <=> {vector} LIMIT 1)"
)
UPSERT = (
    "ON CONFLICT (sector, memory_id) DO UPDATE SET user_id = excluded.user_id, dim = excluded.dim, "
    "model = excluded.model, code = excluded.code, anchor = excluded.anchor"
)
WRITTEN = (
    "(SELECT x.code FROM fresh_codes x WHERE x.sector = a.sector AND x.memory_id = a.memory_id) IS DISTINCT FROM c.code"
)
# 0017's arguments, without the sector
NEAREST_ARGUMENTS = (
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
OLD_NEAREST_ARGUMENTS = (("p_sector", "text", None), *NEAREST_ARGUMENTS)
NEAREST_ARGUMENTS = (*NEAREST_ARGUMENTS, ("p_within", "text[]", "NULL"))  # the sectors searched, NULL for all
FEW = 20_000  # a tenant's rows of the searched sectors under which they are compared exactly, not walked to
# the rows walked: per memory, model and vector, the primary sector's row, else the first sector's
WALKED = """
    (SELECT v.sector, v.memory_id,
            row_number() OVER (PARTITION BY v.memory_id, v.model, v.embedding
                               ORDER BY v.sector = m.primary_sector DESC, v.sector) = 1 AS walked
     FROM memory_vectors v JOIN memories m ON m.id = v.memory_id)
"""


def _signature(arguments: tuple[tuple[str, str, str | None], ...]) -> str:
    return ", ".join(f"{name} {kind}" + (f" DEFAULT {default}" if default else "") for name, kind, default in arguments)


def _secure(table: str) -> None:
    """0013's grants and policies on one vector table."""
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {APP}, {MAINTENANCE}")
    op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
    mine = f"user_id = {TENANT}"
    op.execute(f"CREATE POLICY tenant ON {table} TO {APP} USING ({mine}) WITH CHECK ({mine})")
    op.execute(f"CREATE POLICY maintenance ON {table} TO {MAINTENANCE} USING (true) WITH CHECK (true)")
    op.execute(
        f"""
        DO $$
        BEGIN
            IF current_setting('server_version_num')::int >= 170000 THEN
                EXECUTE 'GRANT MAINTAIN ON {table} TO {MAINTENANCE}';
            END IF;
        END $$
        """
    )


def _code_triggers(*, walked: bool) -> None:
    """0016's triggers on the (new) `memory_vectors`, with 0021's anchors and 0024's writer-filed codes; `walked`:
    codes of walked rows only."""
    only_walked = " AND a.walked" if walked else ""
    gone = "NEW.indexed OR NOT NEW.walked" if walked else "NEW.indexed"
    added = NEAREST_ANCHOR.format(model="a.model", dim="a.dim", vector="a.embedding")
    changed = NEAREST_ANCHOR.format(model="NEW.model", dim="NEW.dim", vector="NEW.embedding")
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION mnemoflow_fresh_codes_added() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO fresh_codes ({CODE_COLUMNS})
            SELECT a.sector, a.memory_id, a.user_id, a.dim, a.model, c.code, {added}
            FROM added a CROSS JOIN LATERAL (SELECT binary_quantize(a.embedding)::varbit AS code) c
            WHERE NOT a.indexed{only_walked} AND {WRITTEN}
            {UPSERT};
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION mnemoflow_fresh_codes_changed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF {gone} THEN
                DELETE FROM fresh_codes WHERE sector = OLD.sector AND memory_id = OLD.memory_id;
            ELSE
                INSERT INTO fresh_codes ({CODE_COLUMNS})
                SELECT NEW.sector, NEW.memory_id, NEW.user_id, NEW.dim, NEW.model, c.code, {changed}
                FROM (SELECT binary_quantize(NEW.embedding)::varbit AS code) c
                {UPSERT};
            END IF;
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        "CREATE TRIGGER fresh_codes_added AFTER INSERT ON memory_vectors REFERENCING NEW TABLE AS added "
        "FOR EACH STATEMENT EXECUTE FUNCTION mnemoflow_fresh_codes_added()"
    )
    op.execute(
        "CREATE TRIGGER fresh_codes_changed AFTER UPDATE ON memory_vectors "
        "FOR EACH ROW WHEN (NOT OLD.indexed OR NOT NEW.indexed) EXECUTE FUNCTION mnemoflow_fresh_codes_changed()"
    )
    op.execute(
        "CREATE TRIGGER fresh_codes_removed AFTER DELETE ON memory_vectors REFERENCING OLD TABLE AS removed "
        "FOR EACH STATEMENT EXECUTE FUNCTION mnemoflow_fresh_codes_removed()"
    )


def _drop_code_triggers() -> None:
    for trigger in ("added", "changed", "removed"):
        op.execute(f"DROP TRIGGER fresh_codes_{trigger} ON memory_vectors")


def _nearest(*, per_sector: bool) -> None:
    if per_sector:  # 0017's
        body = """
            RETURN QUERY EXECUTE format(
                'SELECT v.memory_id, 1 - (v.embedding::vector(%1$s) <=> $1::vector(%1$s)) '
                'FROM memory_vectors v '
                'WHERE v.sector = $2 AND v.dim = %1$s AND v.indexed AND v.user_id = $3 AND v.model = $4%2$s '
                'ORDER BY v.embedding::vector(%1$s) <=> $1::vector(%1$s) LIMIT $5',
                p_dim, p_filter
            ) USING p_query, p_sector, p_user, p_model, p_limit, p_sectors, p_tags, p_start, p_end, p_after,
                    p_before;"""
        declare, arguments = "", OLD_NEAREST_ARGUMENTS
    else:
        # Every sector searched: one walk of the graph. Some sectors (`p_within`): where the tenant has few rows
        # of them, those rows compared exactly through the (user_id, sector, dim) index; else the graph walked with
        # the memory's sectors as its filter (pgvector's iterative scan walks on until it has enough: cheap when the
        # sectors are a good share of the tenant, 100 ms and more for a rare one, which is why few are compared).
        # $2 is unused (the filter's values stay $6 to $11); $12 the sectors.
        body = f"""
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
            ) USING p_query, p_dim, p_user, p_model, p_limit, p_sectors, p_tags, p_start, p_end, p_after, p_before,
                    p_within;"""
        declare, arguments = "DECLARE within_rows bigint;", NEAREST_ARGUMENTS
    op.execute(
        f"""
        CREATE FUNCTION mnemoflow_nearest({_signature(arguments)})
        RETURNS TABLE (memory_id uuid, sim double precision)
        LANGUAGE plpgsql STABLE ROWS 32 AS $fn$
        {declare}
        BEGIN{body}
        END
        $fn$
        """
    )


def _drop_nearest(*, per_sector: bool) -> None:
    arguments = OLD_NEAREST_ARGUMENTS if per_sector else NEAREST_ARGUMENTS
    op.execute(f"DROP FUNCTION mnemoflow_nearest({', '.join(kind for _, kind, _ in arguments)})")


def upgrade() -> None:
    _drop_code_triggers()
    _drop_nearest(per_sector=True)
    op.execute("ALTER TABLE memory_vectors RENAME TO memory_vectors_by_sector")
    op.execute("ALTER INDEX memory_vectors_pkey RENAME TO memory_vectors_by_sector_pkey")
    op.execute(
        f"""
        CREATE TABLE memory_vectors (
            memory_id uuid NOT NULL,
            sector text NOT NULL CHECK (sector IN ({SECTOR_LIST})),
            user_id text NOT NULL,
            dim smallint NOT NULL,
            model text NOT NULL,
            indexed boolean NOT NULL DEFAULT false,
            walked boolean NOT NULL DEFAULT true,
            embedding vector NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (memory_id, sector),
            CONSTRAINT memory_vectors_memory_id_tenant_fkey FOREIGN KEY (memory_id, user_id)
                REFERENCES memories (id, user_id) ON DELETE CASCADE DEFERRABLE
        )
        """
    )
    op.execute(f"INSERT INTO memory_vectors ({COLUMNS}) SELECT {COLUMNS} FROM memory_vectors_by_sector")
    op.execute("DROP TABLE memory_vectors_by_sector")
    op.execute(
        f"UPDATE memory_vectors v SET walked = false FROM {WALKED} w "
        "WHERE v.sector = w.sector AND v.memory_id = w.memory_id AND NOT w.walked"
    )
    # the codes of rows no longer walked: their vector is ranked through its walked row's code
    op.execute(
        "DELETE FROM fresh_codes c WHERE NOT EXISTS (SELECT 1 FROM memory_vectors v "
        "WHERE v.sector = c.sector AND v.memory_id = c.memory_id AND v.walked)"
    )
    op.execute("CREATE INDEX memory_vectors_user_dim ON memory_vectors (user_id, dim, indexed)")
    op.execute("CREATE INDEX memory_vectors_user_sector ON memory_vectors (user_id, sector, dim) WHERE indexed")
    op.execute("CREATE INDEX memory_vectors_fresh ON memory_vectors (created_at) WHERE NOT indexed")
    op.execute("CREATE STATISTICS memory_vectors_settled (mcv) ON user_id, dim, indexed FROM memory_vectors")
    _secure("memory_vectors")
    _code_triggers(walked=True)
    _nearest(per_sector=False)
    settings = get_settings()
    present = op.get_bind().execute(sa.text("SELECT DISTINCT dim FROM memory_vectors")).scalars()
    for dim in sorted({settings.vector_dim or 384, *map(int, present)}):
        op.execute(
            f"CREATE INDEX memory_vectors_hnsw_{dim} ON memory_vectors "
            f"USING hnsw ((embedding::vector({dim})) vector_cosine_ops) "
            f"WITH (m = {int(settings.hnsw_m)}, ef_construction = {int(settings.hnsw_ef_construction)}) "
            f"WHERE dim = {dim} AND indexed AND walked"
        )
    op.execute("ANALYZE memory_vectors")


def downgrade() -> None:
    _drop_code_triggers()
    _drop_nearest(per_sector=False)
    op.execute("ALTER TABLE memory_vectors RENAME TO memory_vectors_one")
    op.execute("ALTER INDEX memory_vectors_pkey RENAME TO memory_vectors_one_pkey")
    op.execute("ALTER INDEX memory_vectors_user_dim RENAME TO memory_vectors_one_user_dim")
    op.execute("ALTER INDEX memory_vectors_fresh RENAME TO memory_vectors_one_fresh")
    op.execute("ALTER INDEX memory_vectors_user_sector RENAME TO memory_vectors_one_user_sector")
    op.execute("ALTER STATISTICS memory_vectors_settled RENAME TO memory_vectors_one_settled")
    op.execute(
        """
        CREATE TABLE memory_vectors (
            memory_id uuid NOT NULL,
            sector text NOT NULL,
            user_id text NOT NULL,
            dim smallint NOT NULL,
            model text NOT NULL,
            indexed boolean NOT NULL DEFAULT false,
            embedding vector NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (sector, memory_id),
            CONSTRAINT memory_vectors_memory_id_tenant_fkey FOREIGN KEY (memory_id, user_id)
                REFERENCES memories (id, user_id) ON DELETE CASCADE DEFERRABLE
        ) PARTITION BY LIST (sector)
        """
    )
    _secure("memory_vectors")
    for sector in SECTORS:
        table = f"memory_vectors_{sector}"
        op.execute(f"CREATE TABLE {table} PARTITION OF memory_vectors FOR VALUES IN ('{sector}')")
        op.execute(f"CREATE INDEX {table}_memory ON {table} (memory_id)")
        op.execute(f"CREATE INDEX {table}_fresh ON {table} (user_id, created_at) WHERE NOT indexed")
        op.execute(f"CREATE INDEX {table}_user_dim ON {table} (user_id, dim, indexed)")
        op.execute(f"CREATE STATISTICS {table}_settled (mcv) ON user_id, dim, indexed FROM {table}")
        _secure(table)
    op.execute(f"INSERT INTO memory_vectors ({COLUMNS}) SELECT {COLUMNS} FROM memory_vectors_one")
    op.execute("DROP TABLE memory_vectors_one")
    _code_triggers(walked=False)
    # every fresh row has its code again
    op.execute(
        f"INSERT INTO fresh_codes ({CODE_COLUMNS}) "
        "SELECT a.sector, a.memory_id, a.user_id, a.dim, a.model, binary_quantize(a.embedding)::varbit, "
        f"{NEAREST_ANCHOR.format(model='a.model', dim='a.dim', vector='a.embedding')} "
        "FROM memory_vectors a WHERE NOT a.indexed ON CONFLICT (sector, memory_id) DO NOTHING"
    )
    _nearest(per_sector=True)
    for sector in SECTORS:
        op.execute(f"ANALYZE memory_vectors_{sector}")
