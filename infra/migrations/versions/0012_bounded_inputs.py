"""Bounded inputs: a hash of the request beside each idempotency key (`jobs.request_hash`), and a report of the user
ids that no longer fit the rule every request's user_id now follows (1-256 letters, digits and -_.@:, no leading _).

No row changes. Rows whose user_id breaks the rule stay where they are and stay readable with the operator key
(GET /maintenance/user-ids, GET /maintenance/user-ids/memories), but no request can name their tenant any more.
The report (rows, distinct user ids and a few of them per table) is logged as warnings, which show on the console
of `mnemoflow migrate` without any logging set up.

`request_hash` is NULL for jobs made before it: a key reused with any body then returns that job, as it did.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25
"""

import logging

from alembic import op
from sqlalchemy import text

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

log = logging.getLogger("mnemoflow.migrations")

# The rule as it was written here (shared.api.common.USER_ID_PATTERN then): a migration keeps its own copy.
USER_ID_PATTERN = r"^[A-Za-z0-9.@:-][A-Za-z0-9_.@:-]{0,255}$"
TABLES = ("memories", "documents", "jobs", "waypoints", "conversation_heads", "tenant_stats")
EXAMPLES = 5


def upgrade() -> None:
    op.execute("ALTER TABLE jobs ADD COLUMN request_hash text")
    report_user_ids()


def report_user_ids() -> None:
    """Log, per table, the rows whose user_id no request can name any more; "_system" owns store-wide jobs."""
    bind = op.get_bind()
    found = False
    for table in TABLES:
        store_own = "AND user_id <> '_system' " if table == "jobs" else ""
        rows = bind.execute(
            text(
                f"SELECT user_id, count(*) AS n FROM {table} WHERE user_id !~ :pattern {store_own}"
                "GROUP BY user_id ORDER BY n DESC, user_id"
            ),
            {"pattern": USER_ID_PATTERN},
        ).all()
        if not rows:
            continue
        found = True
        examples = ", ".join(repr(r.user_id[:80]) for r in rows[:EXAMPLES])
        log.warning(
            "%s: %d rows of %d user ids that no longer fit the user_id rule, e.g. %s",
            table,
            sum(r.n for r in rows),
            len(rows),
            examples,
        )
    if found:
        log.warning(
            "a user_id is now 1-256 characters of letters, digits and -_.@: not starting with _: the rows above stay "
            "readable with the operator key (GET /maintenance/user-ids/memories?stored_user_id=...) but no request "
            "can name their tenant; docs/configuration.md#user-ids says how to move them"
        )


def downgrade() -> None:
    op.execute("ALTER TABLE jobs DROP COLUMN request_hash")
