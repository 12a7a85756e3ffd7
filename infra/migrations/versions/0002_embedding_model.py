"""The store remembers which embedding model made its vectors.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # One row: vectors of different models (or dimensions) are not comparable, so a store has one model.
    op.execute(
        """
        CREATE TABLE embedding_model (
            singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
            provider text NOT NULL,
            model text NOT NULL,
            dim integer NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now()
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS embedding_model")
