"""The hits' waypoints on the read path: the memories up to two links from the hits, read with their links and
their cosines to the query (`fetch_with_links` alone, or `link_ctes` and `linked_rows` inside the one statement).

Reads go straight through psycopg (`shared.db.read_rows`): binary parameters, no ORM layers.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from sqlalchemy.orm import Session

from shared.db import read_rows
from shared.storage.rows import SectorVector, lean_columns
from shared.storage.search import cosine_branches
from shared.storage.statements import Cte, compose


class FetchedLinks(NamedTuple):
    """What `fetch_with_links` read: lean rows by id, and the links among them by kind."""

    rows: dict[uuid.UUID, dict[str, Any]]
    links: list[tuple[uuid.UUID, uuid.UUID, float]]  # association and `next`: activation spreads along both
    order: list[tuple[uuid.UUID, uuid.UUID, float]]  # `next` alone: the reading order context support follows
    contradicts: list[tuple[uuid.UUID, uuid.UUID]]
    supersedes: list[tuple[uuid.UUID, uuid.UUID]]  # (newer, older): the newer answers for the older


def fetch_with_links(
    session: Session,
    user_id: str,
    hit_ids: Sequence[uuid.UUID],
    queries: Mapping[str, SectorVector],
    *,
    known_cosine: Sequence[uuid.UUID] = (),
    max_hops: int = 1,
    fanout: int = 0,
    ladder: Callable[[int], Sequence[int]] = lambda dim: (dim,),
) -> FetchedLinks:
    """One round trip for what scoring needs: the hits, the memories up to `max_hops` (1 or 2) association or
    reading-order (`next`) waypoints away (either direction), each with `cosine` (the query's similarity to its
    primary-sector vector; None for `known_cosine` ids, which the dense search already measured), the links
    that spread activation, those of them that are reading order, and the `contradicts` and `supersedes` edges
    of the hits (a `supersedes` edge brings its other end in: the newer version of a fact a hit states).

    Rows are lean: without their payload (content, summary, metadata, document) but with `version`; the
    caller scores many and reads the payload of the few it returns (`fetch_payloads`, or the hot-row cache).
    `fanout`: the second hop's bound (`link_ctes`)."""
    if not hit_ids:
        return FetchedLinks({}, [], [], [], [])
    params: dict[str, Any] = {}
    statement = compose(
        link_ctes("CAST(:ids AS uuid[])", fanout=fanout),
        linked_rows(queries, ladder, params, known_cosine="CAST(:known AS uuid[])"),
    )
    rows = read_rows(
        session,
        statement,
        params
        | {
            "ids": list(hit_ids),
            "known": list(known_cosine),
            "user_id": user_id,
            "max_hops": max_hops,
        },
        as_dicts=True,
    )
    return links_of(rows, user_id)


def link_ctes(hit_ids: str, *, fanout: int = 0) -> list[Cte]:
    """The waypoints of the hits (`hit_ids`: an SQL array of ids, a parameter or a prior part's), up to `:max_hops`
    away, as `links` (src_id, dst_id, weight, kind), and the memories they reach with the hits, as `wanted` (id).
    `fanout` > 0: a memory one hop away lends the second hop along its `fanout` strongest links only (0: all)."""
    return [
        Cte(
            "direct",
            f"""SELECT src_id, dst_id, weight, kind FROM waypoints
                WHERE kind IN ('association', 'next', 'contradicts', 'supersedes') AND user_id = :user_id
                  AND (src_id = ANY({hit_ids}) OR dst_id = ANY({hit_ids}))""",
        ),
        # what activation spreads on from: not across a version's edge
        Cte(
            "hop1",
            """SELECT src_id AS id FROM direct WHERE kind IN ('association', 'next')
                UNION SELECT dst_id FROM direct WHERE kind IN ('association', 'next')""",
        ),
        Cte("further", _further_links(fanout)),
        Cte("links", "SELECT * FROM direct UNION SELECT * FROM further"),
        Cte(
            "wanted",
            f"""SELECT unnest({hit_ids}) AS id
                UNION SELECT src_id FROM links WHERE kind <> 'contradicts'
                UNION SELECT dst_id FROM links WHERE kind <> 'contradicts'""",
        ),
    ]


def _further_links(fanout: int) -> str:
    """The links of the memories one hop away, when activation spreads further (`:max_hops` 2): all of them, or each
    memory's `fanout` strongest (ties by ids), so a query's second hop reads at most `fanout` links a memory. Index
    lookups, each direction on its own: a join or an OR of the two directions lets the planner scan the whole table."""
    out = (
        "SELECT src_id, dst_id, weight, kind FROM waypoints "
        "WHERE kind IN ('association', 'next') AND user_id = :user_id"
    )
    if fanout <= 0:
        return f"""{out} AND :max_hops >= 2 AND src_id = ANY(ARRAY(SELECT id FROM hop1))
                UNION
                {out} AND :max_hops >= 2 AND dst_id = ANY(ARRAY(SELECT id FROM hop1))"""
    return f"""SELECT DISTINCT l.src_id, l.dst_id, l.weight, l.kind FROM hop1 h CROSS JOIN LATERAL (
                    SELECT * FROM ({out} AND src_id = h.id UNION ALL {out} AND dst_id = h.id) AS e
                    ORDER BY e.weight DESC, e.src_id, e.dst_id LIMIT {int(fanout)}
                ) l
                WHERE :max_hops >= 2"""


def linked_rows(
    queries: Mapping[str, SectorVector],
    ladder: Callable[[int], Sequence[int]],
    params: dict[str, Any],
    *,
    known_cosine: str,
    extra_columns: str = "",
    joins: str = "",
) -> str:
    """The `SELECT` of `link_ctes`' `wanted` memories, lean, each with its links out as arrays and `cosine` (None
    for the ids in `known_cosine`); adds the query vectors to `params`. `extra_columns` and `joins`: more of each
    row (the combined statement's candidates)."""
    cosine = f"CASE WHEN m.id = ANY({known_cosine}) THEN NULL {cosine_branches(queries, ladder, params)} END"
    return f"""SELECT {lean_columns("m")},
                   {cosine} AS cosine,
                   lk.dst_ids, lk.weights, lk.kinds{extra_columns}
            FROM memories m{joins}
            LEFT JOIN LATERAL (  -- its links out, as arrays: binary ids and floats, not text to parse
                SELECT array_agg(l.dst_id) AS dst_ids, array_agg(CAST(l.weight AS double precision)) AS weights,
                       array_agg(l.kind) AS kinds
                FROM links l WHERE l.src_id = m.id
            ) lk ON true
            WHERE m.id = ANY(ARRAY(SELECT id FROM wanted))  -- by key: joined, a large tenant's rows were all read
            """


def links_of(rows: Sequence[dict[str, Any]], user_id: str) -> FetchedLinks:
    """The rows of `linked_rows` as `FetchedLinks` (each row's own columns kept, its link arrays taken out)."""
    memories: dict[uuid.UUID, dict[str, Any]] = {}
    links: list[tuple[uuid.UUID, uuid.UUID, float]] = []
    order: list[tuple[uuid.UUID, uuid.UUID, float]] = []
    contradicts: list[tuple[uuid.UUID, uuid.UUID]] = []
    supersedes: list[tuple[uuid.UUID, uuid.UUID]] = []
    for row in rows:
        if row["user_id"] != user_id:  # looked up by primary key; the tenant is checked on the rows
            continue
        src = row["id"]
        out = (row.pop("dst_ids") or (), row.pop("weights") or (), row.pop("kinds") or ())
        for dst, weight, kind in zip(*out, strict=True):  # aggregated from the same rows
            if kind == "contradicts":
                contradicts.append((src, dst))
                continue
            if kind == "supersedes":
                supersedes.append((src, dst))
                continue
            links.append((src, dst, weight))  # association links and reading order (`next`) both spread
            if kind == "next":
                order.append((src, dst, weight))
        memories[row["id"]] = row
    return FetchedLinks(memories, links, order, contradicts, supersedes)
