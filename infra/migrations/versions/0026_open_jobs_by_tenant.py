"""A tenant's open jobs of a kind, by index: the ingest routes count a tenant's waiting documents on every new one.

`MNEMOFLOW_INGEST_MAX_QUEUED` (shared/ingest/params.py) refuses a new document while the tenant has that many
queued or running; the count must not read the tenant's whole job history (jobs_user_created holds every job it
ever ran). Partial, like jobs_open: it holds only the open jobs, so it stays as small as the backlog.

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-29
"""

from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE INDEX jobs_open_user ON jobs (user_id, kind) WHERE status IN ('queued', 'running')")


def downgrade() -> None:
    op.execute("DROP INDEX jobs_open_user")
