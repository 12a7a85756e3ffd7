"""Ingestion: documents get a lifecycle, a URL identity and a job; uploads are staged in PostgreSQL.

- `documents.status`: queued → extracting → embedding → done, or failed, or duplicate (a URL whose content
  is already another document of the user; `duplicate_of` names it).
- `url_hash` (hash of the normalised URL) is a URL document's identity until its content is fetched;
  `content_hash` becomes nullable for that window and stays the identity of uploads.
- `document_uploads`: the uploaded bytes between the gateway and the ingest worker, in 1 MiB parts,
  deleted in the transaction that plans the document's chunks. PostgreSQL is the one store every gateway
  and worker host shares, parts stream in and out without holding a whole file in memory, and the row
  commits atomically with the document and its job, so no orphan can exist on another host's disk.
  STORAGE EXTERNAL: no pglz pass over bytes that are mostly compressed already (PDF, DOCX, audio).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

STATUSES = "'queued', 'extracting', 'embedding', 'done', 'failed', 'duplicate'"


def upgrade() -> None:
    op.execute("UPDATE documents SET status = 'queued' WHERE status = 'pending'")
    op.execute(
        f"""
        ALTER TABLE documents
            ALTER COLUMN content_hash DROP NOT NULL,
            ALTER COLUMN status SET DEFAULT 'queued',
            ADD COLUMN url_hash text,
            ADD COLUMN format text,
            ADD COLUMN byte_size bigint,
            ADD COLUMN job_id uuid REFERENCES jobs (id) ON DELETE SET NULL,
            ADD COLUMN duplicate_of uuid REFERENCES documents (id) ON DELETE SET NULL,
            ADD CONSTRAINT documents_status_check CHECK (status IN ({STATUSES})),
            ADD CONSTRAINT documents_identity CHECK (content_hash IS NOT NULL OR url_hash IS NOT NULL)
        """
    )
    op.execute("CREATE UNIQUE INDEX documents_user_url ON documents (user_id, url_hash) WHERE url_hash IS NOT NULL")
    op.execute("CREATE INDEX documents_user_created ON documents (user_id, created_at DESC, id DESC)")
    op.execute("CREATE INDEX documents_job ON documents (job_id) WHERE job_id IS NOT NULL")
    op.execute(
        "CREATE INDEX memories_document_chunk ON memories (document_id, chunk_index) WHERE document_id IS NOT NULL"
    )
    op.execute("DROP INDEX memories_document")
    op.execute(
        """
        CREATE TABLE document_uploads (
            document_id uuid NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
            part integer NOT NULL,
            data bytea NOT NULL,
            PRIMARY KEY (document_id, part)
        )
        """
    )
    op.execute("ALTER TABLE document_uploads ALTER COLUMN data SET STORAGE EXTERNAL")


def downgrade() -> None:
    op.execute("DROP TABLE document_uploads")
    op.execute("CREATE INDEX memories_document ON memories (document_id) WHERE document_id IS NOT NULL")
    op.execute("DROP INDEX memories_document_chunk")
    op.execute("DROP INDEX documents_job")
    op.execute("DROP INDEX documents_user_created")
    op.execute("DROP INDEX documents_user_url")
    op.execute("DELETE FROM documents WHERE content_hash IS NULL")
    op.execute(
        """
        ALTER TABLE documents
            DROP CONSTRAINT documents_identity,
            DROP CONSTRAINT documents_status_check,
            DROP COLUMN duplicate_of,
            DROP COLUMN job_id,
            DROP COLUMN byte_size,
            DROP COLUMN format,
            DROP COLUMN url_hash,
            ALTER COLUMN status SET DEFAULT 'pending',
            ALTER COLUMN content_hash SET NOT NULL
        """
    )
