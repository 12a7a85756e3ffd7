"""SQL over waypoints: best-match links, reading order (`next`), typed links, reinforcement and pruning."""

from __future__ import annotations

import itertools
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.orm import Session

from shared.storage import versions
from shared.storage.vector_index import known_sector


def link_to_best_match(
    session: Session, memory_ids: Sequence[uuid.UUID], sector: str, *, dim: int, model: str, threshold: float
) -> int:
    """Create each new memory's single waypoint to its most similar memory (cosine ≥ threshold).

    Searched among indexed memories of the memory's primary sector, in that sector's HNSW graph of its dimension
    (architecture seed: the single strongest link); a link that crosses sectors is made in both directions.
    """
    if not memory_ids:
        return 0
    sector = known_sector(sector)  # a literal, so the walk can use the sector's partial index
    result = session.execute(
        text(
            f"""
            WITH links AS (
                SELECT n.memory_id AS src_id, best.memory_id AS dst_id, n.user_id, best.sim
                FROM memory_vectors n
                CROSS JOIN LATERAL (
                    SELECT v.memory_id,
                           1 - (v.embedding::vector({dim}) <=> n.embedding::vector({dim})) AS sim
                    FROM memory_vectors v
                    WHERE v.sector = '{sector}' AND v.dim = {dim} AND v.indexed AND v.user_id = n.user_id
                      AND v.model = :model AND v.memory_id <> n.memory_id
                    ORDER BY v.embedding::vector({dim}) <=> n.embedding::vector({dim})
                    LIMIT 1
                ) best
                WHERE n.sector = :sector AND n.dim = {dim} AND n.model = :model
                  AND n.memory_id = ANY(CAST(:ids AS uuid[]))
                  AND best.sim >= :threshold
            ),
            forward AS (
                INSERT INTO waypoints (src_id, dst_id, user_id, weight)
                SELECT src_id, dst_id, user_id, LEAST(sim, 1.0) FROM links
                ON CONFLICT DO NOTHING
                RETURNING 1
            ),
            backward AS (
                INSERT INTO waypoints (src_id, dst_id, user_id, weight)
                SELECT l.dst_id, l.src_id, l.user_id, LEAST(l.sim, 1.0)
                FROM links l JOIN memories d ON d.id = l.dst_id
                WHERE d.primary_sector <> :sector
                ON CONFLICT DO NOTHING
                RETURNING 1
            )
            SELECT (SELECT count(*) FROM forward) + (SELECT count(*) FROM backward)
            """
        ),
        {"ids": [str(i) for i in memory_ids], "sector": sector, "threshold": threshold, "model": model},
    ).scalar_one()
    return int(result)


def link_in_order(session: Session, user_id: str, memory_ids: Sequence[uuid.UUID]) -> int:
    """A `next` waypoint (weight 1.0) from each memory to the one after it, skipping a memory repeated in a
    row and any that is gone or not the tenant's (idempotent); the links made."""
    pairs = [(a, b) for a, b in itertools.pairwise(memory_ids) if a != b]
    if not pairs:
        return 0
    result = session.execute(
        text(
            """
            INSERT INTO waypoints (src_id, dst_id, user_id, kind, weight)
            SELECT p.src, p.dst, :user_id, 'next', 1.0
            FROM unnest(CAST(:src AS uuid[]), CAST(:dst AS uuid[])) AS p(src, dst)
            JOIN memories a ON a.id = p.src AND a.user_id = :user_id
            JOIN memories b ON b.id = p.dst AND b.user_id = :user_id
            ON CONFLICT (src_id, dst_id, kind) DO NOTHING
            """
        ),
        {"user_id": user_id, "src": [str(a) for a, _ in pairs], "dst": [str(b) for _, b in pairs]},
    )
    return int(getattr(result, "rowcount", 0) or 0)


def preceding_contents(
    session: Session, user_id: str, memory_ids: Sequence[uuid.UUID], *, turns: int, inclusive: bool = False
) -> dict[uuid.UUID, list[str]]:
    """The contents of up to `turns` memories before each memory along `next` waypoints, oldest first (the
    memory's own content last when `inclusive`, counted among the turns). Where several memories lead to
    one, the latest link is followed. Memories with nothing before them are left out."""
    chains = preceding_turns(session, user_id, memory_ids, turns=turns, inclusive=inclusive)
    return {origin: [content for _, content in chain] for origin, chain in chains.items()}


def preceding_turns(
    session: Session, user_id: str, memory_ids: Sequence[uuid.UUID], *, turns: int, inclusive: bool = False
) -> dict[uuid.UUID, list[tuple[uuid.UUID, str]]]:
    """Like `preceding_contents`, each turn with its memory's id."""
    if turns <= 0 or not memory_ids:
        return {}
    rows = session.execute(
        text(
            """
            WITH RECURSIVE back (origin, id, depth) AS (
                SELECT o.id, o.id, 0 FROM unnest(CAST(:ids AS uuid[])) AS o (id)
                UNION ALL
                SELECT b.origin, p.src_id, b.depth + 1
                FROM back b
                CROSS JOIN LATERAL (
                    SELECT w.src_id FROM waypoints w
                    WHERE w.dst_id = b.id AND w.kind = 'next' AND w.user_id = :user_id
                    ORDER BY w.created_at DESC, w.src_id
                    LIMIT 1
                ) p
                WHERE b.depth < :last
            )
            SELECT b.origin, m.id, m.content
            FROM back b JOIN memories m ON m.id = b.id AND m.user_id = :user_id
            WHERE b.depth >= :first
            ORDER BY b.origin, b.depth DESC
            """
        ),
        {
            "ids": [str(i) for i in memory_ids],
            "user_id": user_id,
            "first": 0 if inclusive else 1,
            "last": turns - 1 if inclusive else turns,
        },
    ).all()
    out: dict[uuid.UUID, list[tuple[uuid.UUID, str]]] = defaultdict(list)
    for origin, memory_id, content in rows:
        out[origin].append((memory_id, content))
    return dict(out)


@dataclass(frozen=True)
class Follower:
    id: uuid.UUID
    content: str
    sectors: tuple[str, ...]


def full_width_followers(
    session: Session, user_id: str, memory_id: uuid.UUID, *, turns: int, lock: bool = True
) -> list[Follower]:
    """The memories up to `turns` `next` links after `memory_id` (every branch) whose vectors are full width,
    locked for a re-embed unless `lock` is false; compressed and fingerprinted ones are left to their
    regeneration."""
    if turns <= 0:
        return []
    rows = session.execute(
        text(
            """
            WITH RECURSIVE ahead (id, depth) AS (
                SELECT CAST(:id AS uuid), 0
                UNION
                SELECT w.dst_id, a.depth + 1
                FROM ahead a JOIN waypoints w ON w.src_id = a.id AND w.kind = 'next' AND w.user_id = :user_id
                WHERE a.depth < :turns
            )
            SELECT m.id, m.content, m.sectors FROM memories m
            WHERE m.id IN (SELECT id FROM ahead WHERE id <> CAST(:id AS uuid)) AND m.user_id = :user_id
              AND m.compression = 'full'
            ORDER BY m.id
            """
            + (" FOR UPDATE" if lock else "")
        ),
        {"id": memory_id, "user_id": user_id, "turns": turns},
    ).all()
    return [Follower(r.id, r.content, tuple(r.sectors)) for r in rows]


def create_link(session: Session, user_id: str, src: uuid.UUID, dst: uuid.UUID, *, kind: str, weight: float) -> bool:
    """A typed waypoint between two of the tenant's memories (weight updated if it exists); False if either
    memory is not the tenant's. `supersedes` also marks the older memory superseded (`versions.supersede`)."""
    if kind == "supersedes" and versions.supersede(session, user_id, [(src, dst)], by="client", weight=weight):
        return True
    row = session.execute(
        text(
            """
            INSERT INTO waypoints (src_id, dst_id, user_id, kind, weight)
            SELECT :src, :dst, :user_id, :kind, :weight
            WHERE (SELECT count(*) FROM memories WHERE id IN (:src, :dst) AND user_id = :user_id) = 2
            ON CONFLICT (src_id, dst_id, kind) DO UPDATE SET weight = EXCLUDED.weight
            RETURNING src_id
            """
        ),
        {"src": src, "dst": dst, "user_id": user_id, "kind": kind, "weight": weight},
    ).first()
    return row is not None


def delete_link(session: Session, user_id: str, src: uuid.UUID, dst: uuid.UUID, *, kind: str) -> bool:
    """Delete a typed waypoint; False if there is none. A `supersedes` link's older memory is current again unless
    another link still supersedes it."""
    if kind == "supersedes":
        return versions.unlink(session, user_id, src, dst)
    gone = session.execute(
        text(
            "DELETE FROM waypoints WHERE src_id = :src AND dst_id = :dst AND kind = :kind AND user_id = :user_id "
            "RETURNING src_id"
        ),
        {"src": src, "dst": dst, "kind": kind, "user_id": user_id},
    ).first()
    return gone is not None


def strengthen_waypoints(
    session: Session,
    user_id: str,
    pairs: Sequence[tuple[uuid.UUID, uuid.UUID]],
    *,
    step: float,
    cap: float,
    times: Sequence[int] | None = None,
) -> int:
    """Add `step` to each traversed waypoint's weight, capped (architecture seed: +0.05, max 1.0); `times[i]`
    steps to `pairs[i]` (walked by as many queries: a capped sum, as one step a query). A pair given twice is
    stepped once."""
    if not pairs:
        return 0
    src, dst = zip(*pairs, strict=True)
    result = session.execute(
        text(
            """
            UPDATE waypoints w SET weight = LEAST(:cap, w.weight + :step * p.n), updated_at = now()
            FROM unnest(CAST(:src AS uuid[]), CAST(:dst AS uuid[]), CAST(:times AS integer[])) AS p(src_id, dst_id, n)
            WHERE w.src_id = p.src_id AND w.dst_id = p.dst_id AND w.user_id = :user_id AND w.kind = 'association'
            """
        ),
        {
            "src": [str(s) for s in src],
            "dst": [str(d) for d in dst],
            "times": list(times) if times is not None else [1] * len(pairs),
            "user_id": user_id,
            "step": step,
            "cap": cap,
        },
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def prune_waypoints(session: Session, *, below: float) -> int:
    """Remove association links weaker than `below` (architecture seed: every 7 days, < 0.05)."""
    result = session.execute(
        text("DELETE FROM waypoints WHERE kind = 'association' AND weight < :below"), {"below": below}
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
