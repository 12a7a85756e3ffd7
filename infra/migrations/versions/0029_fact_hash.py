"""One memory per fact: `memories.fact_hash`, unique per tenant where set.

Two texts that say one thing in other case, punctuation or order of parts have one fact hash
(`shared.text.fact_hash`); a new memory whose fact a tenant's memory already holds is that memory (the insert's
ON CONFLICT), as an exact duplicate is by its content hash. NULL where the write set none (MNEMOFLOW_DEDUP_FACTS
off, imports). Existing memories are hashed here, oldest first: where a tenant already holds two phrasings of one
fact, the oldest gets the hash and the others keep NULL (nothing is merged or deleted by a migration).

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

from shared.text import fact_hash, normalize_content

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

BATCH = 5_000


def upgrade() -> None:
    op.execute("ALTER TABLE memories ADD COLUMN fact_hash text")
    connection = op.get_bind()
    seen: set[str] = set()  # the current tenant's fact hashes
    last = {"u": "", "c": "-infinity", "i": "00000000-0000-0000-0000-000000000000"}
    while True:  # keyset pages: each tenant's memories oldest first
        rows = connection.execute(
            sa.text(
                "SELECT id, user_id, content, created_at FROM memories "
                "WHERE (user_id, created_at, id) > (:u, CAST(:c AS timestamptz), CAST(:i AS uuid)) "
                "ORDER BY user_id, created_at, id LIMIT :n"
            ),
            {**last, "n": BATCH},
        ).all()
        if not rows:
            break
        ids, hashes = [], []
        for row in rows:
            if row.user_id != last["u"]:
                seen.clear()
            last = {"u": row.user_id, "c": row.created_at.isoformat(), "i": str(row.id)}
            digest = fact_hash(normalize_content(row.content))
            if digest not in seen:
                seen.add(digest)
                ids.append(row.id)
                hashes.append(digest)
        connection.execute(
            sa.text(
                "UPDATE memories m SET fact_hash = r.h FROM unnest(CAST(:ids AS uuid[]), CAST(:hashes AS text[])) "
                "AS r(id, h) WHERE m.id = r.id"
            ),
            {"ids": ids, "hashes": hashes},
        )
    op.execute("CREATE UNIQUE INDEX memories_user_fact ON memories (user_id, fact_hash) WHERE fact_hash IS NOT NULL")


def downgrade() -> None:
    op.execute("DROP INDEX memories_user_fact")
    op.execute("ALTER TABLE memories DROP COLUMN fact_hash")
