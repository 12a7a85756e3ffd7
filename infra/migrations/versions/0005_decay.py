"""The memory lifecycle: decay_runs, compression state on the memory, cheap decay updates.

- `vector_dim`: the width a compressed memory's vectors were pooled to; `fingerprint`: a fingerprinted
  memory's 32-d hash vector, kept on its row (it is an identity, not an embedding: nothing searches it, so it
  needs no row in memory_vectors and no index).
- `search` stops being a generated column: PostgreSQL recomputes a stored generated column on every UPDATE,
  so a decay pass that only touches salience and tier paid for three to_tsvector calls per row (measured:
  56k rows/s with it, 130k rows/s without). A trigger keeps it, only when content or tags are written. The
  summary leaves the document: until now it was always empty (nothing wrote it), and decay's summaries are
  made of the content's own words, so it added nothing but the cost of re-indexing on every compression.
- fillfactor 85 leaves room on each page so decay's updates stay HOT: no column they write is indexed.
- each vector partition's user_id index becomes (user_id, dim): one probe tells a query whether a tenant has
  vectors on a compressed rung worth searching.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from alembic import op

from shared.config import get_settings
from shared.memory.sectors import SECTORS

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _document(config: str, prefix: str, *, summary: bool = False) -> str:
    """The full-text document over `prefix`-qualified columns ("NEW." in the trigger); with `summary`, 0001's."""
    parts = [f"setweight(to_tsvector('{config}'::regconfig, {prefix}content), 'A')"]
    if summary:
        parts.append(f"setweight(to_tsvector('{config}'::regconfig, coalesce({prefix}summary, '')), 'B')")
    parts.append(f"setweight(to_tsvector('{config}'::regconfig, mnemoflow_tags_text({prefix}tags)), 'B')")
    return " || ".join(parts)


def upgrade() -> None:
    config = get_settings().text_search_config
    op.execute("ALTER TABLE memories ADD COLUMN vector_dim smallint, ADD COLUMN fingerprint vector")
    for sector in SECTORS:
        op.execute(f"CREATE INDEX memory_vectors_{sector}_user_dim ON memory_vectors_{sector} (user_id, dim)")
        op.execute(f"DROP INDEX memory_vectors_{sector}_user")
    # Decay walks a sector's memories in id order from a random start (ids are random UUIDs).
    op.execute("CREATE INDEX memories_sector_id ON memories (primary_sector, id)")
    op.execute("ALTER TABLE memories SET (fillfactor = 85)")

    op.execute("ALTER TABLE memories ALTER COLUMN search DROP EXPRESSION")
    op.execute(
        f"""
        CREATE FUNCTION mnemoflow_memory_search() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            NEW.search := {_document(config, "NEW.")};
            RETURN NEW;
        END $$
        """
    )
    op.execute(
        "CREATE TRIGGER memories_search BEFORE INSERT OR UPDATE OF content, tags ON memories "
        "FOR EACH ROW EXECUTE FUNCTION mnemoflow_memory_search()"
    )

    op.execute(
        """
        CREATE TABLE decay_runs (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            trigger text NOT NULL CHECK (trigger IN ('schedule', 'operator')),
            status text NOT NULL DEFAULT 'queued'
                CHECK (status IN ('queued', 'running', 'succeeded', 'skipped', 'failed')),
            ratio real NOT NULL CHECK (ratio > 0 AND ratio <= 1),
            reason text,
            plan jsonb NOT NULL DEFAULT '[]'::jsonb,
            processed bigint NOT NULL DEFAULT 0,
            changed bigint NOT NULL DEFAULT 0,
            hot bigint NOT NULL DEFAULT 0,
            warm bigint NOT NULL DEFAULT 0,
            cold bigint NOT NULL DEFAULT 0,
            compressed bigint NOT NULL DEFAULT 0,
            fingerprinted bigint NOT NULL DEFAULT 0,
            segments integer NOT NULL DEFAULT 0,
            duration_ms real,
            resumed_by uuid,
            created_at timestamptz NOT NULL DEFAULT now(),
            started_at timestamptz,
            finished_at timestamptz
        )
        """
    )
    op.execute("CREATE INDEX decay_runs_created ON decay_runs (created_at DESC)")
    op.execute("CREATE INDEX decay_runs_open ON decay_runs (status) WHERE status = 'running'")


def downgrade() -> None:
    config = get_settings().text_search_config
    op.execute("DROP TABLE decay_runs")
    op.execute("DROP TRIGGER memories_search ON memories")
    op.execute("DROP FUNCTION mnemoflow_memory_search()")
    op.execute("DROP INDEX memories_search_gin")
    op.execute("ALTER TABLE memories DROP COLUMN search")
    op.execute(f"ALTER TABLE memories ADD COLUMN search tsvector GENERATED ALWAYS AS ({_document(config, '')}) STORED")
    op.execute("CREATE INDEX memories_search_gin ON memories USING gin (search)")
    op.execute("ALTER TABLE memories RESET (fillfactor)")
    op.execute("DROP INDEX memories_sector_id")
    for sector in SECTORS:
        op.execute(f"CREATE INDEX memory_vectors_{sector}_user ON memory_vectors_{sector} (user_id)")
        op.execute(f"DROP INDEX memory_vectors_{sector}_user_dim")
    op.execute("ALTER TABLE memories DROP COLUMN vector_dim, DROP COLUMN fingerprint")
