"""The read path's first two stages in one statement: full-text and vector candidates, fused by RRF, with the rows
and waypoints of the fused hits (`neighbours.fetch_with_links`), in one round trip instead of three (four with the
search of a period the query names).

The statement is the parts the separate stages run, as CTEs: `bm25.lexical_plan`'s full-text ranking,
`search.dense_plan`'s vector searches, then `fusion.fuse` in SQL (the same ranks, the same sums of 1/(k + rank) in
double precision, the same order: score, then id, whose order as `uuid` is its order as text), the search of the
period (`search.period_plan`: its finds join the hits with their rank there), and `neighbours.link_ctes`' expansion from
the hits. One statement reads one snapshot, so a hit is never missing its row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy.orm import Session

from shared.db import read_rows
from shared.storage import bm25, search
from shared.storage.neighbours import FetchedLinks, link_ctes, linked_rows, links_of
from shared.storage.rows import MemoryFilter, SectorVector
from shared.storage.search import dense_plan
from shared.storage.statements import Cte, compose

HIT_COLUMNS = ("lexical_rank", "lexical_score", "dense_rank", "dense_similarity", "rrf_score", "period_rank")
# The payload (`selected.fetch_payloads`' columns) comes with the hits the hot-row cache does not keep (those not both
# hot and uncompressed: shared.retrieval.hot_rows.cacheable), so that returning them takes no round trip more.
CARRIED = "f.id IS NOT NULL AND NOT (m.tier = 'hot' AND m.compression = 'full')"
PAYLOAD_COLUMNS = ", ".join(
    f"CASE WHEN {CARRIED} THEN m.{column} END AS payload_{column}"
    for column in ("content", "summary", "meta", "document_id")
)
# each row's lexemes among the query's (the evidence gate's coverage)
_COVERED = (
    ", ARRAY(SELECT u.lexeme FROM unnest(m.search) AS u WHERE u.lexeme = ANY(CAST(:query_lexemes AS text[]))) "
    "AS query_terms"
)


class Prelude(NamedTuple):
    """What `prelude` read: the query terms' statistics (`bm25.term_stats`' rows, in the lexemes' order), the
    compressed rungs present, and each of the query's names with its lexemes' document frequencies."""

    terms: list[Any]
    present: set[int]
    names: dict[str, dict[str, int]]  # name -> {lexeme: df in the tenant}; a stop word has no lexeme


def prelude(
    session: Session,
    user_id: str,
    query: str | None,
    config: str,
    dims: Sequence[int],
    names: Sequence[str] = (),
) -> Prelude:
    """What the one statement needs to be written, in one round trip: `bm25.term_stats` of `query` (None: no full
    text), `search.compressed_rungs` among `dims`, and the lexemes of the query's `names` with their document
    frequencies (the evidence gate's unknown names)."""
    parts: list[str] = []
    params: dict[str, Any] = {"user_id": user_id}
    none = "CAST(NULL AS text) AS name"
    if query is not None:
        parts.append(
            "SELECT lexeme, df, documents, total_length, CAST(NULL AS integer) AS dim, "
            f"row_number() OVER (ORDER BY lexeme) AS n, {none} FROM ({bm25.TERM_STATS_SQL}) AS terms"
        )
        params |= {"config": config, "query": query}
    if dims:
        parts.append(
            "SELECT CAST(NULL AS text) AS lexeme, CAST(NULL AS bigint) AS df, CAST(NULL AS bigint) AS documents, "
            f"CAST(NULL AS bigint) AS total_length, dim, CAST(NULL AS bigint) AS n, {none} "
            f"FROM ({search.rungs_sql(dims)}) AS rungs"
        )
    if names:
        parts.append(
            "SELECT t.lexeme, COALESCE(ts.df, 0) AS df, CAST(NULL AS bigint) AS documents, "
            "CAST(NULL AS bigint) AS total_length, CAST(NULL AS integer) AS dim, "
            "CAST(NULL AS bigint) AS n, nm.name "
            "FROM unnest(CAST(:names AS text[])) AS nm(name) "
            "CROSS JOIN LATERAL unnest(to_tsvector(CAST(:config AS regconfig), nm.name)) AS t "
            "LEFT JOIN term_stats ts ON ts.user_id = :user_id AND ts.lexeme = t.lexeme"
        )
        params |= {"config": config, "names": list(names)}
    if not parts:
        return Prelude([], set(), {})
    rows = read_rows(session, " UNION ALL ".join(f"({part})" for part in parts), params)
    terms = sorted((r for r in rows if r.n is not None), key=lambda r: r.n)  # in the lexemes' order
    found: dict[str, dict[str, int]] = {name: {} for name in names}
    for r in rows:
        if r.name is not None:
            found[r.name][r.lexeme] = int(r.df)
    return Prelude(terms, {int(r.dim) for r in rows if r.dim is not None}, found)


@dataclass
class FusedHits:
    """What the combined statement read: the fused hits (best first, with their ranks and scores), the best
    full-text score, and the hits' rows and links as `fetch_with_links` gives them (the rows of hits not kept by
    the hot-row cache with their payload)."""

    hits: list[dict[str, Any]]  # id and HIT_COLUMNS, best first
    max_lexical: float
    fetched: FetchedLinks


def fused_with_links(
    session: Session,
    user_id: str,
    queries: Mapping[str, SectorVector],
    searched: Mapping[str, SectorVector],
    lexical: tuple[str, dict[str, Any]] | None,
    *,
    limit: int,
    where: MemoryFilter,
    present: set[int],
    dense_min_similarity: float,
    rrf_k: int,
    max_hops: int,
    ladder: Callable[[int], Sequence[int]],
    fanout: int = 0,
    period: tuple[str, dict[str, Any]] | None = None,
    on_read: Callable[[], None] | None = None,
    query_lexemes: Sequence[str] = (),
) -> FusedHits:
    """The `limit` best of full text (`lexical`: `bm25.lexical_plan`'s statement, None for none) and the vector
    search of the `searched` sectors (none when empty) fused by RRF, and their rows and links up to `max_hops`
    away (the second hop along each memory's `fanout` strongest links; 0: all), each row's cosine measured with
    `queries` (the query as every sector's model embeds it).
    `period`: `search.period_plan`'s statement, or None; what it finds is a hit too, with its `period_rank` (and,
    when no ranker found it, its similarity there as `dense_similarity`), after the fused ones in that rank's order.
    `on_read`: called once the statement's rows are in, before they are read (the caller's timing).
    `query_lexemes`: each row gets `query_terms`, those of them its text has (the evidence gate's coverage)."""
    params: dict[str, Any] = {"user_id": user_id, "max_hops": max_hops, "rrf_k": rrf_k}
    if lexical is not None:
        lexical_sql, lexical_params = lexical
        params |= lexical_params
    else:
        lexical_sql = "SELECT CAST(NULL AS uuid) AS id, CAST(NULL AS double precision) AS score WHERE false"
    if searched:
        dense_sql, dense_params = dense_plan(searched, limit=limit, where=where, ladder=ladder, present=present)
        params |= dense_params
    else:
        dense_sql = "SELECT CAST(NULL AS uuid) AS memory_id, CAST(NULL AS double precision) AS sim WHERE false"
    params["dense_min"] = dense_min_similarity
    if query_lexemes:
        params["query_lexemes"] = list(query_lexemes)
    if period is not None:
        params |= period[1]
    ctes = [
        *_ranked_ctes(lexical_sql, dense_sql),
        *_hit_ctes(limit, period[0] if period is not None else None),
        *link_ctes("ARRAY(SELECT id FROM fused)", fanout=fanout),
    ]
    select = linked_rows(
        queries,
        ladder,
        params,
        known_cosine="ARRAY(SELECT id FROM fused WHERE dense_similarity IS NOT NULL)",
        extra_columns=", " + ", ".join(f"f.{column}" for column in HIT_COLUMNS) + ", "
        f"f.id IS NOT NULL AS hit, (SELECT max(score) FROM lexical) AS max_lexical, {CARRIED} AS carried, "
        + PAYLOAD_COLUMNS
        + (_COVERED if query_lexemes else ""),
        joins=" LEFT JOIN fused f ON f.id = m.id",
    )
    statement = compose(ctes, select)
    rows = read_rows(session, statement, params, as_dicts=True)
    if on_read is not None:
        on_read()
    hits = []
    max_lexical = 0.0
    for row in rows:
        max_lexical = float(row.pop("max_lexical") or 0.0)
        hit = {name: row.pop(name) for name in HIT_COLUMNS}
        if row.pop("hit"):
            hits.append({"id": row["id"], **hit})
        payload = {name: row.pop(f"payload_{name}") for name in ("content", "summary", "meta", "document_id")}
        if row.pop("carried"):  # as `fetch_payloads` gives it
            row |= {
                "content": payload["content"],
                "summary": payload["summary"],
                "metadata": payload["meta"] or {},
                "document_id": payload["document_id"],
            }
    # the fused hits by score, then what only the period's search found, in its order there
    hits.sort(key=lambda h: (-h["rrf_score"], h["period_rank"] if h["rrf_score"] == 0 else 0, str(h["id"])))
    return FusedHits(hits, max_lexical, links_of(rows, user_id))


def _ranked_ctes(lexical_sql: str, dense_sql: str) -> list[Cte]:
    """Both rankers' finds, each ranked, and fused by RRF as `ranked` (id, its ranks and scores, `rrf_score`)."""
    return [
        Cte("lexical", lexical_sql, materialized=True),
        Cte("lexical_ranked", "SELECT id, score, row_number() OVER (ORDER BY score DESC, id) AS rank FROM lexical"),
        Cte("dense_best", f"SELECT memory_id AS id, max(sim) AS sim FROM ({dense_sql}) AS found GROUP BY memory_id"),
        Cte(
            "dense_ranked",
            "SELECT id, sim, row_number() OVER (ORDER BY sim DESC, id) AS rank FROM dense_best WHERE sim >= :dense_min",
        ),
        Cte(
            "ranked",
            """SELECT COALESCE(l.id, d.id) AS id, l.rank AS lexical_rank, l.score AS lexical_score,
                   d.rank AS dense_rank, d.sim AS dense_similarity,
                   COALESCE(CAST(1 AS double precision) / (:rrf_k + l.rank), 0)
                     + COALESCE(CAST(1 AS double precision) / (:rrf_k + d.rank), 0) AS rrf_score
            FROM lexical_ranked l FULL JOIN dense_ranked d ON d.id = l.id""",
        ),
    ]


def _hit_ctes(limit: int, period_sql: str | None) -> list[Cte]:
    """The hits as `fused` (`ranked`'s columns and `period_rank`): the `limit` best fused; with a period's search,
    what it found joined to them (those parts only then: on every other query they cost ~0.7 ms, measured)."""
    if period_sql is None:
        return [
            Cte(
                "fused",
                "SELECT *, CAST(NULL AS bigint) AS period_rank FROM ranked "
                f"ORDER BY rrf_score DESC, id LIMIT {int(limit)}",
                materialized=True,
            )
        ]
    return [
        Cte("best", f"SELECT * FROM ranked ORDER BY rrf_score DESC, id LIMIT {int(limit)}", materialized=True),
        Cte(
            "period_ranked",
            f"SELECT id, sim, row_number() OVER (ORDER BY sim DESC, id) AS rank FROM ({period_sql}) AS found",
            materialized=True,
        ),
        Cte(
            "fused",
            """SELECT b.*, p.rank AS period_rank FROM best b LEFT JOIN period_ranked p ON p.id = b.id
            UNION ALL
            SELECT p.id, NULL, NULL, NULL, p.sim, 0, p.rank FROM period_ranked p
            WHERE NOT EXISTS (SELECT 1 FROM best b WHERE b.id = p.id)""",
            materialized=True,
        ),
    ]
