"""User summaries (OpenMemory's `/users/{id}/summary`): one row per tenant, the extractive summary of its memories
and the digest it was written from, with the count of the tenant's memories and its newest memory's time when it
was built (a read that finds either changed builds it again: shared/memory/summaries.py).

A tenant table: granted to both roles, row-level security with a policy per role, as 0013 does.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

APP = "mnemoflow_app"
MAINTENANCE = "mnemoflow_maintenance"
TENANT = "(SELECT NULLIF(current_setting('mnemoflow.user_id', true), ''))"


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE user_summaries (
            user_id text PRIMARY KEY,
            summary text NOT NULL,
            digest jsonb NOT NULL DEFAULT '{}'::jsonb,
            memory_count integer NOT NULL,
            reflection_count integer NOT NULL,
            newest_memory_at timestamptz,
            updated_at timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON user_summaries TO {APP}, {MAINTENANCE}")
    op.execute("ALTER TABLE user_summaries ENABLE ROW LEVEL SECURITY")
    mine = f"user_id = {TENANT}"
    op.execute(f"CREATE POLICY tenant ON user_summaries TO {APP} USING ({mine}) WITH CHECK ({mine})")
    op.execute(f"CREATE POLICY maintenance ON user_summaries TO {MAINTENANCE} USING (true) WITH CHECK (true)")


def downgrade() -> None:
    op.execute("DROP TABLE user_summaries")
