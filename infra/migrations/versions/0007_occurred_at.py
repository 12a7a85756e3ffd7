"""Memories get `occurred_at`: when what a memory records happened (a conversation turn's time, an event's
date), as the writer says; NULL means "when it was stored" (`created_at`). A query naming a month or a year
ranks memories that occurred then higher. Nullable, no default: adding it rewrites nothing.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE memories ADD COLUMN occurred_at timestamptz")


def downgrade() -> None:
    op.execute("ALTER TABLE memories DROP COLUMN occurred_at")
