"""Conversation heads: per tenant and conversation key (`session_id=abc`, from an added memory's metadata), the
last memory added to it, so `POST /memory/add` links the next one after it without scanning the tenant's
memories. The add locks its conversation's row, so two adds of one conversation are linked one after the other.

`memory_id` has no foreign key: deleting a memory then never waits on an add holding its conversation's row (the
two would deadlock: the add links to the memory, the delete would clear the head), and a head whose memory is
gone reads as none. NULL: a conversation whose row was made but whose first memory was a duplicate.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE conversation_heads (
            user_id text NOT NULL,
            key text NOT NULL,
            memory_id uuid,
            updated_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (user_id, key)
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE conversation_heads")
