"""Initial schema: memories, per-sector vectors (partitioned, HNSW), waypoints, documents, jobs, embed_logs.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from alembic import op

from shared.config import get_settings
from shared.memory.sectors import SECTORS

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

SECTOR_LIST = ", ".join(f"'{s}'" for s in SECTORS)


def _partition_index_sql(sector: str, dim: int, m: int, ef_construction: int) -> str:
    """The HNSW index of one sector partition at one dimension, as this schema had it (0030 makes one table)."""
    return (
        f"CREATE INDEX IF NOT EXISTS memory_vectors_{sector}_hnsw_{int(dim)} ON memory_vectors_{sector} "
        f"USING hnsw ((embedding::vector({int(dim)})) vector_cosine_ops) "
        f"WITH (m = {int(m)}, ef_construction = {int(ef_construction)}) WHERE dim = {int(dim)} AND indexed"
    )


def upgrade() -> None:
    settings = get_settings()
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")

    # Tags join the full-text document; array_to_string is only STABLE, so wrap it as IMMUTABLE
    # (true for text[]) to use it in a generated column.
    op.execute(
        """
        CREATE FUNCTION mnemoflow_tags_text(tags text[]) RETURNS text
        LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN array_to_string(tags, ' ')
        """
    )

    op.execute(
        """
        CREATE TABLE documents (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            user_id text NOT NULL,
            source_type text NOT NULL,
            source_uri text,
            filename text,
            mime_type text,
            content_hash text NOT NULL,
            status text NOT NULL DEFAULT 'pending',
            chunk_count integer NOT NULL DEFAULT 0,
            meta jsonb NOT NULL DEFAULT '{}'::jsonb,
            error text,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now(),
            UNIQUE (user_id, content_hash)
        )
        """
    )

    op.execute(
        f"""
        CREATE TABLE memories (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            user_id text NOT NULL,
            content text NOT NULL,
            summary text,
            primary_sector text NOT NULL CHECK (primary_sector IN ({SECTOR_LIST})),
            sectors text[] NOT NULL,
            tags text[] NOT NULL DEFAULT '{{}}',
            meta jsonb NOT NULL DEFAULT '{{}}'::jsonb,
            content_hash text NOT NULL,
            document_id uuid REFERENCES documents (id) ON DELETE SET NULL,
            chunk_index integer,
            salience real NOT NULL CHECK (salience >= 0 AND salience <= 1),
            decay_lambda real NOT NULL,
            coactivations integer NOT NULL DEFAULT 0,
            tier text NOT NULL DEFAULT 'warm' CHECK (tier IN ('hot', 'warm', 'cold')),
            status text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'superseded', 'contradicted')),
            confidence real NOT NULL DEFAULT 1.0 CHECK (confidence >= 0 AND confidence <= 1),
            classification_confidence real NOT NULL DEFAULT 0,
            compression text NOT NULL DEFAULT 'full' CHECK (compression IN ('full', 'compressed', 'fingerprinted')),
            version integer NOT NULL DEFAULT 1,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now(),
            last_seen_at timestamptz NOT NULL DEFAULT now(),
            search tsvector GENERATED ALWAYS AS (
                setweight(to_tsvector('{settings.text_search_config}'::regconfig, content), 'A')
                || setweight(to_tsvector('{settings.text_search_config}'::regconfig, coalesce(summary, '')), 'B')
                || setweight(to_tsvector('{settings.text_search_config}'::regconfig, mnemoflow_tags_text(tags)), 'B')
            ) STORED,
            UNIQUE (user_id, content_hash)
        )
        """
    )
    op.execute("CREATE INDEX memories_search_gin ON memories USING gin (search)")
    op.execute("CREATE INDEX memories_user_created ON memories (user_id, created_at DESC, id DESC)")
    op.execute("CREATE INDEX memories_user_sector ON memories (user_id, primary_sector)")
    op.execute("CREATE INDEX memories_tags_gin ON memories USING gin (tags)")
    op.execute("CREATE INDEX memories_document ON memories (document_id) WHERE document_id IS NOT NULL")

    # Vectors live apart from the memory row, so salience/decay updates never touch a vector index.
    # `embedding` has no fixed dimension: each partition carries one partial HNSW index per dimension
    # in use (`WHERE dim = N AND indexed` over `embedding::vector(N)`), so compressed rungs stay indexable.
    # Bulk writes land with indexed = false (the "fresh" tier: COPY speed, searched exactly through the
    # partial user_id index) and a background merge flips them into the HNSW index.
    op.execute(
        """
        CREATE TABLE memory_vectors (
            memory_id uuid NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
            sector text NOT NULL,
            user_id text NOT NULL,
            dim smallint NOT NULL,
            model text NOT NULL,
            indexed boolean NOT NULL DEFAULT false,
            embedding vector NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (sector, memory_id)
        ) PARTITION BY LIST (sector)
        """
    )
    for sector in SECTORS:
        op.execute(f"CREATE TABLE memory_vectors_{sector} PARTITION OF memory_vectors FOR VALUES IN ('{sector}')")
        op.execute(f"CREATE INDEX memory_vectors_{sector}_memory ON memory_vectors_{sector} (memory_id)")
        op.execute(f"CREATE INDEX memory_vectors_{sector}_user ON memory_vectors_{sector} (user_id)")
        op.execute(
            f"CREATE INDEX memory_vectors_{sector}_fresh ON memory_vectors_{sector} (user_id, created_at) "
            "WHERE NOT indexed"
        )
        op.execute(
            _partition_index_sql(sector, settings.vector_dim or 384, settings.hnsw_m, settings.hnsw_ef_construction)
        )

    # Per-tenant term statistics for BM25 (document frequency, corpus size, total length), counted when a
    # memory settles (single add, or the fresh-tier merge) so bulk writers never contend on hot terms.
    op.execute(
        """
        CREATE TABLE term_stats (
            user_id text NOT NULL,
            lexeme text NOT NULL,
            df integer NOT NULL,
            PRIMARY KEY (user_id, lexeme)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE tenant_stats (
            user_id text PRIMARY KEY,
            documents bigint NOT NULL,
            total_length bigint NOT NULL
        )
        """
    )

    op.execute(
        """
        CREATE TABLE waypoints (
            src_id uuid NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
            dst_id uuid NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
            user_id text NOT NULL,
            kind text NOT NULL DEFAULT 'association'
                CHECK (kind IN ('association', 'contradicts', 'supersedes', 'next')),
            weight real NOT NULL CHECK (weight >= 0 AND weight <= 1),
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (src_id, dst_id, kind),
            CHECK (src_id <> dst_id)
        )
        """
    )
    op.execute("CREATE INDEX waypoints_dst ON waypoints (dst_id)")
    op.execute("CREATE INDEX waypoints_weight ON waypoints (weight)")

    op.execute(
        """
        CREATE TABLE jobs (
            id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            user_id text NOT NULL,
            kind text NOT NULL,
            status text NOT NULL DEFAULT 'queued'
                CHECK (status IN ('queued', 'running', 'succeeded', 'failed')),
            progress_done integer NOT NULL DEFAULT 0,
            progress_total integer NOT NULL DEFAULT 0,
            attempts integer NOT NULL DEFAULT 0,
            error text,
            params jsonb NOT NULL DEFAULT '{}'::jsonb,
            result jsonb NOT NULL DEFAULT '{}'::jsonb,
            idempotency_key text,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now(),
            started_at timestamptz,
            finished_at timestamptz,
            UNIQUE (user_id, kind, idempotency_key)
        )
        """
    )
    op.execute("CREATE INDEX jobs_user_created ON jobs (user_id, created_at DESC)")
    op.execute("CREATE INDEX jobs_open ON jobs (status, updated_at) WHERE status IN ('queued', 'running')")

    # A job's work split into units a task can claim; the unit's status is the exactly-once record.
    op.execute(
        """
        CREATE TABLE job_chunks (
            job_id uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
            seq integer NOT NULL,
            sector text NOT NULL,
            item_count integer NOT NULL,
            items jsonb NOT NULL,
            status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done', 'failed')),
            attempts integer NOT NULL DEFAULT 0,
            error text,
            result jsonb,
            enqueued_at timestamptz NOT NULL DEFAULT now(),
            done_at timestamptz,
            PRIMARY KEY (job_id, seq)
        )
        """
    )
    op.execute("CREATE INDEX job_chunks_pending ON job_chunks (enqueued_at) WHERE status = 'pending'")

    # Events applied at most once (e.g. a query's reinforcement redelivered by the broker).
    op.execute(
        """
        CREATE TABLE applied_events (
            event_id text PRIMARY KEY,
            applied_at timestamptz NOT NULL DEFAULT now()
        )
        """
    )

    op.execute(
        """
        CREATE TABLE embed_logs (
            id bigserial PRIMARY KEY,
            provider text NOT NULL,
            model text NOT NULL,
            status text NOT NULL CHECK (status IN ('completed', 'failed')),
            item_count integer NOT NULL,
            latency_ms real NOT NULL,
            error text,
            job_id uuid,
            created_at timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute("CREATE INDEX embed_logs_created ON embed_logs (created_at DESC)")


def downgrade() -> None:
    for table in (
        "embed_logs",
        "applied_events",
        "job_chunks",
        "jobs",
        "waypoints",
        "tenant_stats",
        "term_stats",
        "memory_vectors",
        "memories",
        "documents",
    ):
        op.execute(f"DROP TABLE IF EXISTS {table} CASCADE")
    op.execute("DROP FUNCTION IF EXISTS mnemoflow_tags_text(text[])")
