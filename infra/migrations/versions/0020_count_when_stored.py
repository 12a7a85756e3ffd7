"""BM25 statistics count a memory from when it is stored: the memories waiting for their merge are counted now.

Until now a bulk-stored memory's terms were counted when the merge moved its primary vector into the index (or when
decay fingerprinted it first), minutes after it was stored for a large import: meanwhile its tenant's word counts
were too low, every word of a tenant importing 100,000 memories looked rare, and its queries read every match of
its commonest words (300 ms a query; with 7 % counted, 29 ms against 2 settled). The application now counts each
memory in the transaction that stores it (shared/memory/engine.py); this counts the ones stored before that and
still waiting: neither fingerprinted nor with their primary-sector vector in the index.

As the tables' owner, past row-level security, every tenant at once.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27
"""

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

WAITING = """
    SELECT m.id, m.user_id, m.search FROM memories m
    WHERE m.compression <> 'fingerprinted'
      AND NOT EXISTS (SELECT 1 FROM memory_vectors v
                      WHERE v.memory_id = m.id AND v.sector = m.primary_sector AND v.indexed)
"""


def _count(sign: int) -> None:
    op.execute(
        f"""
        INSERT INTO term_stats (user_id, lexeme, df)
        SELECT w.user_id, t.lexeme, count(*) * {sign}
        FROM ({WAITING}) AS w, unnest(w.search) AS t
        GROUP BY w.user_id, t.lexeme
        ORDER BY w.user_id, t.lexeme
        ON CONFLICT (user_id, lexeme) DO UPDATE SET df = term_stats.df + excluded.df
        """
    )
    op.execute(
        f"""
        INSERT INTO tenant_stats (user_id, documents, total_length)
        SELECT w.user_id, count(*) * {sign}, sum(length(w.search)) * {sign}
        FROM ({WAITING}) AS w
        GROUP BY w.user_id
        ON CONFLICT (user_id) DO UPDATE SET documents = tenant_stats.documents + excluded.documents,
            total_length = tenant_stats.total_length + excluded.total_length
        """
    )


def upgrade() -> None:
    _count(+1)


def downgrade() -> None:
    # the code before this revision counts them again at their merge
    _count(-1)
