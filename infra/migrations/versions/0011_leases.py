"""Leases on work: a job step or a chunk is claimed by one worker for a while (`lease_owner`, `lease_until`). An
attempt counts when a worker claims the work, not when a message arrives, and the sweeper re-sends work only when
its lease has expired (the holder died) or when it was never claimed long after it was sent (its message was lost),
so a backlog never fails healthy work. `applied_events` gets an index by age so it can be pruned.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable columns without defaults: catalogue changes only, no table rewrite.
    for table in ("jobs", "job_chunks"):
        op.execute(f"ALTER TABLE {table} ADD COLUMN lease_owner text")
        op.execute(f"ALTER TABLE {table} ADD COLUMN lease_until timestamptz")
    op.execute("CREATE INDEX applied_events_age ON applied_events (applied_at)")


def downgrade() -> None:
    op.execute("DROP INDEX applied_events_age")
    for table in ("jobs", "job_chunks"):
        op.execute(f"ALTER TABLE {table} DROP COLUMN lease_until")
        op.execute(f"ALTER TABLE {table} DROP COLUMN lease_owner")
