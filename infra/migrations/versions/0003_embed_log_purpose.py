"""embed_logs says what each provider call was for (add, update, query, batch, reembed).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE embed_logs ADD COLUMN purpose text")
    op.execute("CREATE INDEX embed_logs_job ON embed_logs (job_id) WHERE job_id IS NOT NULL")


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS embed_logs_job")
    op.execute("ALTER TABLE embed_logs DROP COLUMN IF EXISTS purpose")
