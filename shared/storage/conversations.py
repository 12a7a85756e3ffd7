"""SQL over conversation heads: the last memory a tenant added to each conversation its metadata names
(`shared.memory.sequence.conversation_key`), so the next one is linked after it.

Functions flush; the caller's boundary commits. A head names its memory without a foreign key: deleting a memory
then never waits on a head (an add holds its head's row lock while it links), and a head whose memory is gone is
read as no head.
"""

from __future__ import annotations

import uuid

from sqlalchemy import text
from sqlalchemy.orm import Session


def lock_head(session: Session, user_id: str, key: str) -> uuid.UUID | None:
    """Lock the conversation's head until the transaction ends (a concurrent add of the same conversation waits,
    then reads the memory this one adds); the memory it names, None when there is none or it was deleted."""
    params = {"user_id": user_id, "key": key}
    # A new conversation's row is made first so there is a row to lock: a second add waits on its insert.
    session.execute(
        text("INSERT INTO conversation_heads (user_id, key) VALUES (:user_id, :key) ON CONFLICT DO NOTHING"), params
    )
    # In READ COMMITTED, FOR UPDATE returns the row as the transaction that held it committed it; the memory is
    # looked up by a statement of its own, whose snapshot sees that transaction's memory too.
    head = session.execute(
        text("SELECT memory_id FROM conversation_heads WHERE user_id = :user_id AND key = :key FOR UPDATE"), params
    ).scalar_one()
    if head is None:
        return None
    alive = session.execute(
        text("SELECT EXISTS (SELECT 1 FROM memories WHERE id = :id AND user_id = :user_id)"),
        {"id": head, "user_id": user_id},
    ).scalar_one()
    return head if alive else None


def head(session: Session, user_id: str, key: str) -> uuid.UUID | None:
    """The conversation's last memory as it stands, without locking it (None when there is none or it is gone)."""
    return session.execute(
        text(
            "SELECT h.memory_id FROM conversation_heads h JOIN memories m ON m.id = h.memory_id "
            "AND m.user_id = h.user_id WHERE h.user_id = :user_id AND h.key = :key"
        ),
        {"user_id": user_id, "key": key},
    ).scalar_one_or_none()


def move_head(session: Session, user_id: str, key: str, memory_id: uuid.UUID) -> None:
    """The conversation's last memory is now `memory_id` (its row locked by `lock_head` in this transaction)."""
    session.execute(
        text(
            "UPDATE conversation_heads SET memory_id = :memory_id, updated_at = now() "
            "WHERE user_id = :user_id AND key = :key"
        ),
        {"user_id": user_id, "key": key, "memory_id": memory_id},
    )
