"""An index on when each memory happened (`occurred_at`, else `created_at`), per tenant: the
`occurred_after` / `occurred_before` filters and the search of the period a query names read a range of it
instead of the tenant's every row.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX memories_user_occurred ON memories (user_id, (COALESCE(occurred_at, created_at)))")


def downgrade() -> None:
    op.execute("DROP INDEX memories_user_occurred")
