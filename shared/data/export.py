"""A tenant's export: its documents, memories (with their vectors) and waypoints as JSON lines, streamed a page at
a time from one snapshot (docs/data.md#the-export-format).

One read-only REPEATABLE READ transaction for the whole file: whatever is written meanwhile, the file is the
tenant as it was at its first line, and every waypoint in it has both its memories in it.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import asdict
from datetime import UTC, datetime

from shared import __version__
from shared.api.data import FORMAT, VERSION
from shared.data import lines
from shared.db import Database
from shared.storage import transfer
from shared.storage.sector_models import current_models

PAGE = 500  # rows read at a time


def export_lines(db: Database, user_id: str, *, vectors: bool = True, page: int = PAGE) -> Generator[bytes]:
    """The file, line by line: header, documents, memories, waypoints, end. `db` acts for the tenant."""
    with db.session(user_id) as session:
        # before its first statement: the transaction begins with them (psycopg's BEGIN carries both)
        session.connection(execution_options={"isolation_level": "REPEATABLE READ", "postgresql_readonly": True})
        models = {sector: asdict(model) for sector, model in current_models(session).items()}
        yield lines.dumps(
            {
                "type": "header",
                "format": FORMAT,
                "version": VERSION,
                "user_id": user_id,
                "exported_at": datetime.now(UTC),
                "mnemoflow": __version__,
                "vectors": vectors,
                "models": models,
            }
        )
        counts = {"documents": 0, "memories": 0, "waypoints": 0}
        cursor: transfer.Cursor | None = None
        while rows := transfer.document_page(session, user_id, after=cursor, limit=page):
            for row in rows:
                yield lines.dumps(lines.document_line(row))
            counts["documents"] += len(rows)
            cursor = (rows[-1]["created_at"], rows[-1]["id"])
        cursor = None
        while memories := transfer.memory_page(session, user_id, after=cursor, limit=page, vectors=vectors):
            for row, stored in memories:
                primary = [v for v in stored if v.sector == row["primary_sector"]]
                # settled: its primary vector in the index, or fingerprinted (no vector to wait for)
                indexed = all(v.indexed for v in primary) if primary else row["compression"] == "fingerprinted"
                carried = [(v.sector, v.model, v.vector) for v in stored] if vectors else []
                yield lines.dumps(lines.memory_line(row, carried, indexed=indexed))
            counts["memories"] += len(memories)
            cursor = (memories[-1][0]["created_at"], memories[-1][0]["id"])
        cursor = None
        # Waypoints after every memory, so a reader meets both ends of each first; found by their source, a page of
        # memories at a time (waypoints have no index by tenant).
        while keys := transfer.memory_keys(session, user_id, after=cursor, limit=page):
            for row in transfer.waypoints_from(session, user_id, [memory_id for _, memory_id in keys]):
                yield lines.dumps(lines.waypoint_line(row))
                counts["waypoints"] += 1
            cursor = keys[-1]
        yield lines.dumps({"type": "end", **counts})
