"""Versions of a fact: when a memory stopped being current, and every change to a memory.

`memories.valid_to`: the time a superseded memory stopped being current (the time of the fact that replaced it);
NULL while it is current. A nullable column without a default: no table rewrite.

`memory_history`: what changed in a memory, one row a change (a content edit keeps the earlier content; a
supersession names the other memory; a merged duplicate keeps what was merged). A memory's creation is its own
row in `memories` and is not repeated here. Rows go with their memory (ON DELETE CASCADE); `other_id` is not a key,
so a change that names a memory deleted since still reads.

A tenant table: both roles, row-level security with a policy per role (0013).

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-02
"""

from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

APP = "mnemoflow_app"
MAINTENANCE = "mnemoflow_maintenance"
TENANT = "(SELECT NULLIF(current_setting('mnemoflow.user_id', true), ''))"
EVENTS = "'content', 'superseded', 'supersedes', 'restored', 'merged'"


def upgrade() -> None:
    op.execute("ALTER TABLE memories ADD COLUMN valid_to timestamptz")
    op.execute(
        f"""
        CREATE TABLE memory_history (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            memory_id uuid NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
            user_id text NOT NULL,
            event text NOT NULL CHECK (event IN ({EVENTS})),
            at timestamptz NOT NULL DEFAULT now(),
            other_id uuid,
            content text,
            detail jsonb NOT NULL DEFAULT '{{}}'::jsonb
        )
        """
    )
    op.execute("CREATE INDEX memory_history_memory ON memory_history (memory_id, id)")
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON memory_history TO {APP}, {MAINTENANCE}")
    op.execute("ALTER TABLE memory_history ENABLE ROW LEVEL SECURITY")
    mine = f"user_id = {TENANT}"
    op.execute(f"CREATE POLICY tenant ON memory_history TO {APP} USING ({mine}) WITH CHECK ({mine})")
    op.execute(f"CREATE POLICY maintenance ON memory_history TO {MAINTENANCE} USING (true) WITH CHECK (true)")


def downgrade() -> None:
    op.execute("DROP TABLE memory_history")
    op.execute("ALTER TABLE memories DROP COLUMN valid_to")
