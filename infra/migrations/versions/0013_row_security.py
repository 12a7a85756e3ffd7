"""Row-level security on every tenant table, two roles to act as, and foreign keys that keep a tenant's rows its own.

- Roles (cluster-wide, made once): `mnemoflow_app`, whose sessions see only the rows of the tenant in the
  setting `mnemoflow.user_id` (none when it is empty), and `mnemoflow_maintenance`, for store-wide work (decay,
  merge, re-embed, the sweeper, pruning), which sees every row. Both NOLOGIN, neither owns a table nor bypasses
  row-level security; processes connect as the owner and take a role per engine (shared/tenancy.py). A migrator
  that is not a superuser needs CREATEROLE (or the roles made beforehand) and is granted both roles to take them.
- Tenant tables get a policy per role: memories, memory_vectors and its partitions (searched directly too),
  waypoints, term_stats, tenant_stats, conversation_heads, documents, jobs; job_chunks and document_uploads belong
  to the tenant of their job or document. RLS is enabled, not forced: the owner migrates and is not bound.
- Shared: sector_models and applied_events (no tenant data) the app reads and adds to; embed_logs it only
  appends to. decay_runs and everything else: maintenance only.
- Under a policy the planner uses an index for a condition only if it knows the condition cannot leak
  ("leakproof"). The full-text match (ts_match_vq) is not, so a search read every memory of the tenant:
  `memory_text` is the tenant's memories as a plain view (its owner's rights, its own tenant condition, no
  security barrier), so the match keeps the GIN index. COALESCE is not either, so the index of when a memory
  happened (0008) is rebuilt over the same value written as a CASE (`storage.rows.occurred_sql`).
- Composite foreign keys: a vector and both ends of a waypoint name their memory's tenant, a memory its
  document's, a document its job's and its duplicate's; another tenant's id is refused, not merely filtered.
  They are deferrable (checked per statement unless a transaction says SET CONSTRAINTS ALL DEFERRED): moving a
  tenant to another user_id changes both ends of each key, one table at a time (docs/configuration.md#user-ids).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25
"""

from alembic import op

from shared.memory.sectors import SECTORS

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

APP = "mnemoflow_app"
MAINTENANCE = "mnemoflow_maintenance"
# A sub-SELECT: evaluated once per statement, not once per row a policy checks (a vector looked up by id)
TENANT = "(SELECT NULLIF(current_setting('mnemoflow.user_id', true), ''))"
HAPPENED = "(CASE WHEN occurred_at IS NULL THEN created_at ELSE occurred_at END)"
PARTITIONS = [f"memory_vectors_{sector}" for sector in SECTORS]
TENANT_TABLES = [
    "memories",
    "memory_vectors",
    *PARTITIONS,
    "waypoints",
    "term_stats",
    "tenant_stats",
    "conversation_heads",
    "documents",
    "jobs",
]
# rows that belong to the tenant of their parent row (the parent's own policy decides)
CHILD_TABLES = {"job_chunks": ("jobs", "job_id"), "document_uploads": ("documents", "document_id")}
MAINTENANCE_ONLY = ["decay_runs", "embed_logs", "sector_models", "applied_events"]
# (table, the column naming the parent, the key with its tenant, parent, what deleting the parent does)
TENANT_KEYS = [
    ("memory_vectors", "memory_id", "memory_id, user_id", "memories", "CASCADE"),
    ("waypoints", "src_id", "src_id, user_id", "memories", "CASCADE"),
    ("waypoints", "dst_id", "dst_id, user_id", "memories", "CASCADE"),
    ("memories", "document_id", "document_id, user_id", "documents", "SET NULL (document_id)"),
    ("documents", "job_id", "job_id, user_id", "jobs", "SET NULL (job_id)"),
    ("documents", "duplicate_of", "duplicate_of, user_id", "documents", "SET NULL (duplicate_of)"),
]


def _create_roles() -> None:
    for role in (APP, MAINTENANCE):
        op.execute(
            f"""
            DO $$
            BEGIN
                IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN
                    CREATE ROLE {role} NOLOGIN;
                END IF;
            EXCEPTION
                WHEN duplicate_object OR unique_violation THEN NULL;  -- another database's migration made it
                WHEN insufficient_privilege THEN
                    RAISE EXCEPTION 'role {role} is missing and % may not create it', current_user
                        USING HINT = 'run as a role with CREATEROLE, or have an administrator run: '
                                     'CREATE ROLE {role} NOLOGIN; GRANT {role} TO ' || current_user;
            END $$
            """
        )
        # a migrator that is not a superuser takes the roles by membership (a superuser needs none)
        op.execute(
            f"""
            DO $$
            BEGIN
                IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
                   AND NOT pg_has_role(current_user, '{role}', 'MEMBER') THEN
                    EXECUTE format('GRANT {role} TO %I', current_user);
                END IF;
            END $$
            """
        )


def upgrade() -> None:
    _create_roles()
    for table in TENANT_TABLES:
        op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {APP}, {MAINTENANCE}")
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        mine = f"user_id = {TENANT}"
        op.execute(f"CREATE POLICY tenant ON {table} TO {APP} USING ({mine}) WITH CHECK ({mine})")
        op.execute(f"CREATE POLICY maintenance ON {table} TO {MAINTENANCE} USING (true) WITH CHECK (true)")
    for table, (parent, column) in CHILD_TABLES.items():
        owned = f"EXISTS (SELECT FROM {parent} p WHERE p.id = {table}.{column})"
        op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {APP}, {MAINTENANCE}")
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY tenant ON {table} TO {APP} USING ({owned}) WITH CHECK ({owned})")
        op.execute(f"CREATE POLICY maintenance ON {table} TO {MAINTENANCE} USING (true) WITH CHECK (true)")
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {', '.join(MAINTENANCE_ONLY)} TO {MAINTENANCE}")
    op.execute(f"GRANT SELECT, INSERT ON sector_models, applied_events TO {APP}")
    op.execute(f"GRANT INSERT ON embed_logs TO {APP}")
    op.execute(f"GRANT USAGE ON SEQUENCE embed_logs_id_seq TO {APP}, {MAINTENANCE}")
    # ANALYZE after a merge (PostgreSQL 17 has the MAINTAIN privilege; before, only the owner may analyze)
    op.execute(
        f"""
        DO $$
        BEGIN
            IF current_setting('server_version_num')::int >= 170000 THEN
                EXECUTE 'GRANT MAINTAIN ON {", ".join(PARTITIONS)} TO {MAINTENANCE}';
            END IF;
        END $$
        """
    )

    op.execute(
        f"""
        CREATE VIEW memory_text AS
        SELECT id, user_id, search, sectors, tags, created_at, occurred_at FROM memories WHERE user_id = {TENANT}
        """
    )
    op.execute(f"GRANT SELECT ON memory_text TO {APP}")
    # when a memory happened, per tenant (0008), as an expression the planner may use under a policy
    op.execute(f"CREATE INDEX memories_user_happened ON memories (user_id, {HAPPENED})")
    op.execute("DROP INDEX memories_user_occurred")

    for table in ("memories", "documents", "jobs"):
        op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {table}_tenant_key UNIQUE (id, user_id)")
    for table, column, columns, parent, on_delete in TENANT_KEYS:
        op.execute(
            f"ALTER TABLE {table} DROP CONSTRAINT {table}_{column}_fkey, "
            f"ADD CONSTRAINT {table}_{column}_tenant_fkey FOREIGN KEY ({columns}) "
            f"REFERENCES {parent} (id, user_id) ON DELETE {on_delete} DEFERRABLE"
        )


def downgrade() -> None:
    for table, column, _, parent, on_delete in TENANT_KEYS:
        plain = on_delete.split(" (")[0]
        op.execute(
            f"ALTER TABLE {table} DROP CONSTRAINT {table}_{column}_tenant_fkey, "
            f"ADD CONSTRAINT {table}_{column}_fkey FOREIGN KEY ({column}) REFERENCES {parent} (id) ON DELETE {plain}"
        )
    for table in ("memories", "documents", "jobs"):
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {table}_tenant_key")
    op.execute("CREATE INDEX memories_user_occurred ON memories (user_id, (COALESCE(occurred_at, created_at)))")
    op.execute("DROP INDEX memories_user_happened")
    op.execute("DROP VIEW memory_text")
    for table in [*TENANT_TABLES, *CHILD_TABLES]:
        op.execute(f"DROP POLICY tenant ON {table}")
        op.execute(f"DROP POLICY maintenance ON {table}")
        op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
    tables = ", ".join([*TENANT_TABLES, *CHILD_TABLES, *MAINTENANCE_ONLY])
    op.execute(f"REVOKE ALL ON {tables} FROM {APP}, {MAINTENANCE}")
    op.execute(f"REVOKE ALL ON SEQUENCE embed_logs_id_seq FROM {APP}, {MAINTENANCE}")
    # the roles stay: they are the cluster's, and other databases may use them
