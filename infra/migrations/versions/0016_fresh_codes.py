"""Binary codes of the fresh tier's vectors: a narrow first pass for a tenant's unindexed vectors.

A query compares every fresh vector of its tenant exactly until the merge indexes it; at 100,000 fresh vectors
that reads ~150 MB a query (1.5 KB each at 384 dimensions). `fresh_codes` holds one bit per dimension of each
fresh vector (pgvector's `binary_quantize`: 48 bytes at 384), so the first pass ranks them by Hamming distance over
a table a twentieth the size and only the best few hundred are compared exactly (shared/storage/search.py).

Kept by triggers on `memory_vectors`, so every way a vector is written, changed, merged or deleted keeps its code:
a statement that inserts fresh vectors adds their codes, and one that deletes vectors drops theirs (statement-level,
with transition tables: one statement more per statement, not one per row of a COPY of thousands); a fresh vector
changed in place (decay's compression, a re-embed) gets its code rewritten, and the merge's `indexed = true` drops
it (row-level, only for rows fresh before or after the update).

A tenant table: both roles, row-level security with a policy per role (0013); its key names its memory's tenant.
The triggers run as the statement's role, so the tenant's policy checks the codes too.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27
"""

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

APP = "mnemoflow_app"
MAINTENANCE = "mnemoflow_maintenance"
TENANT = "(SELECT NULLIF(current_setting('mnemoflow.user_id', true), ''))"
CODE = "binary_quantize(embedding)::varbit"
CODE_COLUMNS = "sector, memory_id, user_id, dim, model, code"
# a code already there (a vector written again in place) takes the new one's values
UPSERT = (
    "ON CONFLICT (sector, memory_id) DO UPDATE "
    "SET user_id = excluded.user_id, dim = excluded.dim, model = excluded.model, code = excluded.code"
)


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE fresh_codes (
            sector text NOT NULL,
            memory_id uuid NOT NULL,
            user_id text NOT NULL,
            dim smallint NOT NULL,
            model text NOT NULL,
            code varbit NOT NULL,
            PRIMARY KEY (sector, memory_id),
            CONSTRAINT fresh_codes_memory_id_tenant_fkey FOREIGN KEY (memory_id, user_id)
                REFERENCES memories (id, user_id) ON DELETE CASCADE DEFERRABLE
        )
        """
    )
    op.execute("CREATE INDEX fresh_codes_user ON fresh_codes (user_id, dim)")
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON fresh_codes TO {APP}, {MAINTENANCE}")
    op.execute("ALTER TABLE fresh_codes ENABLE ROW LEVEL SECURITY")
    mine = f"user_id = {TENANT}"
    op.execute(f"CREATE POLICY tenant ON fresh_codes TO {APP} USING ({mine}) WITH CHECK ({mine})")
    op.execute(f"CREATE POLICY maintenance ON fresh_codes TO {MAINTENANCE} USING (true) WITH CHECK (true)")

    op.execute(
        f"""
        CREATE FUNCTION mnemoflow_fresh_codes_added() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO fresh_codes ({CODE_COLUMNS})
            SELECT sector, memory_id, user_id, dim, model, {CODE} FROM added WHERE NOT indexed
            {UPSERT};
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        f"""
        CREATE FUNCTION mnemoflow_fresh_codes_changed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.indexed THEN
                DELETE FROM fresh_codes WHERE sector = OLD.sector AND memory_id = OLD.memory_id;
            ELSE
                INSERT INTO fresh_codes ({CODE_COLUMNS})
                VALUES (NEW.sector, NEW.memory_id, NEW.user_id, NEW.dim, NEW.model,
                        binary_quantize(NEW.embedding)::varbit)
                {UPSERT};
            END IF;
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        """
        CREATE FUNCTION mnemoflow_fresh_codes_removed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            DELETE FROM fresh_codes c USING removed o
            WHERE NOT o.indexed AND c.sector = o.sector AND c.memory_id = o.memory_id;
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        "CREATE TRIGGER fresh_codes_added AFTER INSERT ON memory_vectors REFERENCING NEW TABLE AS added "
        "FOR EACH STATEMENT EXECUTE FUNCTION mnemoflow_fresh_codes_added()"
    )
    # Row by row, and only for rows fresh before or after: decay rewrites settled vectors by the ten thousand,
    # and the condition spares them any call.
    op.execute(
        "CREATE TRIGGER fresh_codes_changed AFTER UPDATE ON memory_vectors "
        "FOR EACH ROW WHEN (NOT OLD.indexed OR NOT NEW.indexed) EXECUTE FUNCTION mnemoflow_fresh_codes_changed()"
    )
    op.execute(
        "CREATE TRIGGER fresh_codes_removed AFTER DELETE ON memory_vectors REFERENCING OLD TABLE AS removed "
        "FOR EACH STATEMENT EXECUTE FUNCTION mnemoflow_fresh_codes_removed()"
    )
    # the vectors already waiting for their merge
    op.execute(
        f"INSERT INTO fresh_codes ({CODE_COLUMNS}) "
        f"SELECT sector, memory_id, user_id, dim, model, {CODE} FROM memory_vectors WHERE NOT indexed"
    )


def downgrade() -> None:
    for trigger in ("added", "changed", "removed"):
        op.execute(f"DROP TRIGGER fresh_codes_{trigger} ON memory_vectors")
        op.execute(f"DROP FUNCTION mnemoflow_fresh_codes_{trigger}()")
    op.execute("DROP TABLE fresh_codes")
