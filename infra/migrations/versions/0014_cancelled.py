"""A job, a chunk of it and a document can end `cancelled` (POST /jobs/{id}/cancel): a terminal status beside
succeeded and failed (`done` and `failed` for a document). What was stored before the cancel stays; nothing is
stored or planned after it (docs/data.md#cancelling-a-job).

Only the CHECK constraints change: each table is read once to check them, none is rewritten.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26
"""

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

JOBS = "'queued', 'running', 'succeeded', 'failed'"
CHUNKS = "'pending', 'done', 'failed'"
DOCUMENTS = "'queued', 'extracting', 'embedding', 'done', 'failed', 'duplicate'"


def _checks(jobs: str, chunks: str, documents: str) -> None:
    op.execute(
        "ALTER TABLE jobs DROP CONSTRAINT jobs_status_check, "
        f"ADD CONSTRAINT jobs_status_check CHECK (status IN ({jobs}))"
    )
    op.execute(
        "ALTER TABLE job_chunks DROP CONSTRAINT job_chunks_status_check, "
        f"ADD CONSTRAINT job_chunks_status_check CHECK (status IN ({chunks}))"
    )
    op.execute(
        "ALTER TABLE documents DROP CONSTRAINT documents_status_check, "
        f"ADD CONSTRAINT documents_status_check CHECK (status IN ({documents}))"
    )


def upgrade() -> None:
    _checks(f"{JOBS}, 'cancelled'", f"{CHUNKS}, 'cancelled'", f"{DOCUMENTS}, 'cancelled'")


def downgrade() -> None:
    op.execute("UPDATE jobs SET status = 'failed', error = 'cancelled' WHERE status = 'cancelled'")
    op.execute("UPDATE job_chunks SET status = 'failed' WHERE status = 'cancelled'")
    op.execute("UPDATE documents SET status = 'failed', error = 'cancelled' WHERE status = 'cancelled'")
    _checks(JOBS, CHUNKS, DOCUMENTS)
