"""What the read path's last stage reads of the hits it keeps: their payloads (those the candidates' statement did
not carry) and their primary-sector vectors (for MMR). Straight through psycopg where it can (`shared.db.read_rows`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from pgvector import Vector
from sqlalchemy import text
from sqlalchemy.orm import Session

from shared.db import read_rows
from shared.storage.rows import SectorVector, row_to_dict


def fetch_payloads(session: Session, user_id: str, memory_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
    """Content, summary, metadata and document of the tenant's memories among `memory_ids`."""
    if not memory_ids:
        return {}
    rows = read_rows(
        session,
        "SELECT id, content, summary, meta, document_id FROM memories "
        "WHERE id = ANY(CAST(:ids AS uuid[])) AND user_id = :user_id",
        {"ids": list(memory_ids), "user_id": user_id},
        as_dicts=True,
    )
    return {row["id"]: row_to_dict(row) for row in rows}


def primary_vectors(
    session: Session, memory_ids: Sequence[uuid.UUID], queries: Mapping[str, SectorVector]
) -> dict[uuid.UUID, np.ndarray]:
    """Each memory's primary-sector vector, of the model its sector is queried with (for MMR)."""
    if not memory_ids:
        return {}
    sectors = list(queries)
    rows = session.execute(
        text(
            """
            SELECT v.memory_id, v.embedding FROM memory_vectors v JOIN memories m ON m.id = v.memory_id
            JOIN unnest(CAST(:sectors AS text[]), CAST(:models AS text[])) AS q(sector, model)
              ON q.sector = m.primary_sector
            WHERE v.memory_id = ANY(CAST(:ids AS uuid[])) AND v.sector = m.primary_sector AND v.model = q.model
            """
        ),
        {
            "ids": [str(i) for i in memory_ids],
            "sectors": sectors,
            "models": [queries[sector].model for sector in sectors],
        },
    ).all()
    return {r.memory_id: _as_array(r.embedding) for r in rows}


def _as_array(value: Any) -> np.ndarray:
    """pgvector gives a Vector (or a numpy array, by version); float32 either way."""
    return np.asarray(value.to_numpy() if isinstance(value, Vector) else value, dtype=np.float32)
