"""Fresh codes filed by their writer: the insert trigger writes only the codes its statement did not write itself.

Migration 0021's trigger files each fresh vector's code under the nearest of its model's anchors by comparing the
vector with every anchor in SQL (`ORDER BY centroid <=> embedding LIMIT 1`): ~40 µs a vector, a fifth of what
PostgreSQL spends on a memory of a burst. The engine's writer (`copy_vectors`, shared/storage/vectors.py) now files
the codes itself, a product of two small matrices per chunk in numpy, and writes them in the statement that moves
the vectors into their partitions. The trigger still writes the code of every other fresh vector inserted (another
writer, a vector whose model had no anchors when its writer looked), as before; one its statement already wrote with
the same code it leaves alone (a lookup by key: the scalar subquery runs per row, never as a scan of the codes).

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-29
"""

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

COLUMNS = "sector, memory_id, user_id, dim, model, code, anchor"
NEAREST = (
    "(SELECT f.anchor FROM fresh_anchors f WHERE f.model = a.model AND f.dim = a.dim "
    "ORDER BY f.centroid <=> a.embedding LIMIT 1)"
)
UPSERT = (
    "ON CONFLICT (sector, memory_id) DO UPDATE SET user_id = excluded.user_id, dim = excluded.dim, "
    "model = excluded.model, code = excluded.code, anchor = excluded.anchor"
)
WRITTEN = (
    "(SELECT x.code FROM fresh_codes x WHERE x.sector = a.sector AND x.memory_id = a.memory_id) IS DISTINCT FROM c.code"
)


def _added(*, skip_written: bool) -> None:
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION mnemoflow_fresh_codes_added() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO fresh_codes ({COLUMNS})
            SELECT a.sector, a.memory_id, a.user_id, a.dim, a.model, c.code, {NEAREST}
            FROM added a CROSS JOIN LATERAL (SELECT binary_quantize(a.embedding)::varbit AS code) c
            WHERE NOT a.indexed{" AND " + WRITTEN if skip_written else ""}
            {UPSERT};
            RETURN NULL;
        END $$
        """
    )


def upgrade() -> None:
    _added(skip_written=True)


def downgrade() -> None:
    _added(skip_written=False)
