"""A chunk's model work and broker priority, kept with it: the tenant's backlog is summed from `cost`, and the
sweeper re-sends a stalled chunk at the `priority` it was first sent with (shared/backpressure.py).

Both are metadata-only additions (a constant default, a nullable column): no table rewrite. Rows from before
count their items (`cost` 0) and are re-sent at the highest priority (`priority` NULL), as they were sent.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-02
"""

from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE job_chunks ADD COLUMN cost integer NOT NULL DEFAULT 0, ADD COLUMN priority smallint "
        "CHECK (priority BETWEEN 0 AND 9)"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE job_chunks DROP COLUMN priority, DROP COLUMN cost")
