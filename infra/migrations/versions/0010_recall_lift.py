"""The part of each memory's salience that being returned by queries added (`recall_lift`): the whole salience
still feeds decay and tiers, and ranking counts only a share of the lift (docs/retrieval.md#reinforcement).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A constant default: a catalogue change only, no table rewrite, however large the store.
    op.execute("ALTER TABLE memories ADD COLUMN recall_lift real NOT NULL DEFAULT 0")


def downgrade() -> None:
    op.execute("ALTER TABLE memories DROP COLUMN recall_lift")
