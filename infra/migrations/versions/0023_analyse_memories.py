"""The maintenance role may analyse `memories`: the merge cycle keeps the read path's statistics up with a burst.

A 100,000-memory import is stored in about 25 s; autovacuum visits a database once a minute, so until then the
import's queries were planned on `memories` never analysed (on those statistics the statement of a settled 100k
store took 11-13 ms against 4-5) and on vector partitions analysed while empty (shared/storage/planner_stats.py).
The merge cycle, which runs as the maintenance role during the burst, now analyses them when their rows changed a
lot. 0013 gave it the vector partitions and 0022 `fresh_codes`; this gives it `memories` (PostgreSQL 17's MAINTAIN
privilege; on an older server only the owner may analyse, and the merge leaves `memories` to autovacuum).

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-28
"""

from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

MAINTENANCE = "mnemoflow_maintenance"


def _maintain(grant: bool) -> None:
    statement = "GRANT MAINTAIN ON memories TO" if grant else "REVOKE MAINTAIN ON memories FROM"
    op.execute(
        f"""
        DO $$
        BEGIN
            IF current_setting('server_version_num')::int >= 170000 THEN
                EXECUTE '{statement} {MAINTENANCE}';
            END IF;
        END $$
        """
    )


def upgrade() -> None:
    _maintain(grant=True)


def downgrade() -> None:
    _maintain(grant=False)
