"""The embedding model is recorded per sector (advanced mode may give a sector a model of its own).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from alembic import op

from shared.memory.sectors import SECTORS

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

SECTOR_LIST = ", ".join(f"'{s}'" for s in SECTORS)


def upgrade() -> None:
    op.execute(
        f"""
        CREATE TABLE sector_models (
            sector text PRIMARY KEY CHECK (sector IN ({SECTOR_LIST})),
            provider text NOT NULL,
            model text NOT NULL,
            dim integer NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute(
        f"""
        INSERT INTO sector_models (sector, provider, model, dim, created_at)
        SELECT s, provider, model, dim, created_at FROM embedding_model, unnest(ARRAY[{SECTOR_LIST}]) AS s
        """
    )
    op.execute("DROP TABLE embedding_model")


def downgrade() -> None:
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
    op.execute(
        "INSERT INTO embedding_model (provider, model, dim, created_at) "
        "SELECT provider, model, dim, created_at FROM sector_models ORDER BY sector LIMIT 1"
    )
    op.execute("DROP TABLE sector_models")
