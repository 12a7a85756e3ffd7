"""The part of each memory's salience that being returned by queries added (`recall_lift`), and when it was last
used other than by being returned (`last_used_at`: written, or confirmed by POST /memory/reinforce; NULL: when it
was stored). The whole salience and `last_seen_at` still feed decay and tiers; ranking counts a share of what being
returned added (docs/retrieval.md#reinforcement-what-use-may-change-in-ranking).

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
    op.execute("ALTER TABLE memories ADD COLUMN last_used_at timestamptz")


def downgrade() -> None:
    op.execute("ALTER TABLE memories DROP COLUMN last_used_at")
    op.execute("ALTER TABLE memories DROP COLUMN recall_lift")
