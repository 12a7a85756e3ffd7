"""BM25 in SQL: each tenant's term statistics, which memories they count, and the full-text candidates.

The scoring formula and the parameters are `shared.retrieval.lexical`'s; this module runs them.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from shared.db import read_rows
from shared.retrieval.lexical import LexicalParams, select_terms
from shared.storage.rows import MemoryFilter, filter_arguments


def count_terms(session: Session, memory_ids: Sequence[uuid.UUID], *, sign: int) -> None:
    """Add (+1) or remove (-1) memories from their tenant's BM25 statistics: document frequency per
    lexeme, document count and total length. Call exactly once per memory stored or leaving (and around a change
    of its text: out, then in)."""
    if not memory_ids:
        return
    params = {"ids": [str(i) for i in memory_ids], "sign": sign}
    session.execute(
        text(
            """
            INSERT INTO term_stats (user_id, lexeme, df)
            SELECT m.user_id, t.lexeme, count(*) * :sign
            FROM memories m, unnest(m.search) AS t
            WHERE m.id = ANY(CAST(:ids AS uuid[]))
            GROUP BY m.user_id, t.lexeme
            ORDER BY m.user_id, t.lexeme
            ON CONFLICT (user_id, lexeme) DO UPDATE SET df = term_stats.df + excluded.df
            """
        ),
        params,
    )
    session.execute(
        text(
            """
            INSERT INTO tenant_stats (user_id, documents, total_length)
            SELECT user_id, count(*) * :sign, sum(length(search)) * :sign
            FROM memories WHERE id = ANY(CAST(:ids AS uuid[]))
            GROUP BY user_id
            ON CONFLICT (user_id) DO UPDATE SET documents = tenant_stats.documents + excluded.documents,
                total_length = tenant_stats.total_length + excluded.total_length
            """
        ),
        params,
    )


def _tsquery_literal(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def lexical_candidates(
    session: Session, user_id: str, query: str, *, limit: int, where: MemoryFilter, params: LexicalParams
) -> list[tuple[uuid.UUID, float]]:
    """Full-text candidates scored like BM25 with the tenant's document frequencies, best first (`lexical_plan`)."""
    plan = lexical_plan(term_stats(session, user_id, query, params), user_id, limit=limit, where=where, params=params)
    if plan is None:
        return []
    rows = read_rows(session, *plan)
    return [(r.id, float(r.score)) for r in rows]


def term_stats(session: Session, user_id: str, query: str, params: LexicalParams) -> list[Any]:
    """The query's distinct lexemes, each with the tenant's document frequency, document count and total length."""
    return read_rows(session, TERM_STATS_SQL, {"config": params.config, "query": query, "user_id": user_id})


# `term_stats`' statement, the lexemes in order
TERM_STATS_SQL = """
            SELECT q.lexeme, COALESCE(ts.df, 0) AS df, tn.documents, tn.total_length
            FROM (SELECT DISTINCT lexeme FROM unnest(to_tsvector(CAST(:config AS regconfig), :query))) AS q
            LEFT JOIN term_stats ts ON ts.user_id = :user_id AND ts.lexeme = q.lexeme
            LEFT JOIN tenant_stats tn ON tn.user_id = :user_id
            ORDER BY q.lexeme
            """


def lexical_plan(
    rows: Sequence[Any], user_id: str, *, limit: int, where: MemoryFilter, params: LexicalParams
) -> tuple[str, dict[str, Any]] | None:
    """The full-text candidates' statement (`id`, `score`; best first, at most `limit`) and its parameters, from
    the query's `term_stats`; None when the query has no candidates to look for.

    Lucene's IDF, ln(1 + (N - df + 0.5) / (df + 0.5)), stays positive on tiny stores (no small-corpus
    collapse); a term's frequency in the memory saturates by k1, normalised by the memory's length (its
    distinct lexemes against the tenant's average).
    Only rare terms select candidates (Elasticsearch's common-terms cutoff), so a query with a word in
    half the store does not rank half the store; every query term still adds to the score.
    """
    if not rows:
        return None
    lexemes = [r.lexeme for r in rows]
    df = {r.lexeme: max(int(r.df), 0) for r in rows}
    documents = max(int(rows[0].documents or 0), 0)
    avg_length = int(rows[0].total_length or 0) / documents if documents else 1.0
    n = max(documents, 1)
    idf = {t: math.log(1 + (n - min(df.get(t, 0), n) + 0.5) / (df.get(t, 0) + 0.5)) for t in lexemes}
    common_df = max(params.common_ratio * documents, params.common_min_df)
    rare = select_terms([t for t in lexemes if df.get(t, 0) <= common_df], df, budget=params.select_budget)
    read_cap = 0
    if rare:
        selector = " | ".join(_tsquery_literal(t) for t in rare)
        may_match = sum(df.get(t, 0) for t in rare)  # at most
    else:  # every term is common: the memories with all of them are the candidates
        # A term in most memories narrows nothing but costs its whole posting list. Ranking by common words is
        # worth it only while the memories with all of them are few enough to score each one with term
        # frequency (the rescore window; the budget when there is none): expected to be more, if the words
        # occurred independently, they are too common to rank by and the query gets no full-text candidates
        # (the dense ones remain). Words that go together (a phrase: "invoice backlog") match far more often
        # than that estimate — at 1M, two terms in 5.5 % of memories each were expected in 3,000 and were in
        # all 55,000 of the one's (0.38 s) — so only the first `cap` matches the index gives are read.
        cap = params.rescore_window or params.select_budget
        narrowing = [t for t in lexemes if df.get(t, 0) <= n / 2] or lexemes
        expected = n * math.prod(min(df.get(t, 0), n) / n for t in narrowing)
        if cap and expected > cap:
            return None
        selector = " & ".join(_tsquery_literal(t) for t in narrowing)
        may_match = min(df.get(t, 0) for t in narrowing)
        read_cap = cap if cap and may_match > cap else 0

    clause, filter_params = where.sql("m")
    norm = "(:k1 * (1 - :b + :b * length(m.search) / CAST(:avg_length AS double precision)))"
    # A matched term counted once: cheap (a lookup per term), and the score itself for memories that say
    # each query word once.
    terms = " + ".join(
        f"CASE WHEN m.search @@ CAST(:t{i} AS tsquery) THEN :idf{i} ELSE 0 END" for i in range(len(lexemes))
    )
    once_sql = f"({terms}) * (:k1 + 1) / (1 + {norm})"
    bind: dict[str, Any] = {f"t{i}": _tsquery_literal(t) for i, t in enumerate(lexemes)}
    bind |= {f"idf{i}": idf[t] for i, t in enumerate(lexemes)}
    # The tenant's matches, through `mnemoflow_matching` (migration 0018): its statement is planned on every call for
    # the tenant (a large one among many small ones reads the GIN match alone, not the match intersected with its
    # whole user index), over `memory_text`, where the match keeps its GIN index (migration 0013: under row-level
    # security it would not). The filter goes in as text, its values as that statement's $4 to $9.
    passed = filter_arguments(clause, filter_params, first=4, name="matching_filter")
    matching = f"""SELECT m.id, m.search FROM mnemoflow_matching(:user_id, CAST(:selector AS tsquery),
            CAST({":read_cap" if read_cap else "NULL"} AS integer){passed}) AS m"""
    if read_cap:
        bind["read_cap"] = read_cap
        may_match = read_cap
    if params.term_frequency:
        # tf = the lexeme's positions in the memory (content, summary and tags), saturated by k1
        score_sql = f"""(SELECT COALESCE(sum(q.idf * t.tf * (:k1 + 1) / (t.tf + {norm})), 0)
                 FROM (SELECT u.lexeme, COALESCE(cardinality(u.positions), 1) AS tf FROM unnest(m.search) u) t
                 JOIN unnest(CAST(:lexemes AS text[]), CAST(:idfs AS double precision[])) AS q(lexeme, idf)
                 ON q.lexeme = t.lexeme)"""
        bind |= {"lexemes": lexemes, "idfs": [idf[t] for t in lexemes]}
        # Term frequency costs a walk through each memory's lexemes (~5 us a row here): when more memories
        # than the window may match, the window's best by the count-once score are the ones scored with it.
        if params.rescore_window and may_match > params.rescore_window:
            window = int(params.rescore_window)
            matching = f"""SELECT * FROM ({matching} ORDER BY {once_sql} DESC, m.id LIMIT {window}) AS m"""
    else:
        score_sql = once_sql
    statement = f"""
            SELECT m.id, {score_sql} AS score
            FROM ({matching}) AS m
            ORDER BY score DESC, m.id
            LIMIT {int(limit)}
            """
    # The limits are literals (the pool is k x 4, a handful of values): with a parameter for one, the statement's
    # generic plan looks dearer than a custom one and the server plans it again on every query.
    return statement, bind | filter_params | {
        "user_id": user_id,
        "selector": selector,
        "k1": params.k1,
        "b": params.b,
        "avg_length": max(avg_length, 1.0),
    }
