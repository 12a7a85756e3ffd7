"""The read path's tables kept analysed through a burst of writes: `ANALYZE` of those whose rows changed a lot since
their last one.

The read path plans its statements from each table's statistics: `mnemoflow_nearest` and `mnemoflow_fresh` per call,
and each fresh vector's lookup by its key. PostgreSQL's autovacuum refreshes them once a tenth of a table's rows
changed, but it visits each database once a minute (`autovacuum_naptime`), and a 100,000-memory import is stored in
25 s. Measured at the end of such an import with nothing merged yet (`bench.ingest`, the merge waiting):
- the vector table still had the statistics their migration gathered while they were empty. Each of the 400
  fresh vectors a query compares exactly was then looked up by key and through the tenant's whole `(user_id, dim)`
  index (a BitmapAnd): the read path's statement took 0.9 s at 100,000 fresh vectors, 17 ms at 30,000;
- `memories` had never been analysed: on those statistics the statement of a settled 100k store took 11-13 ms
  instead of 4-5.

The merge cycle calls `refresh` on every run, whether it merges or yields to the burst: a table is analysed again
once its rows changed since its last `ANALYZE` by at least `STALE_SHARE` of the rows that one counted (and
`STALE_MIN`), so about once each time it grows by half. An `ANALYZE` reads a sample of at most 30,000 rows: 0.1-0.2 s
a table at 100,000 memories. The merge's lanes also analyse the vector table, every few thousand
vectors (`merge_cycle.ANALYZE_EVERY`).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.orm import Session

READ_PATH_TABLES = ("memories", "fresh_codes", "memory_vectors")
STALE_SHARE = 0.5  # rows changed since the last ANALYZE, as a share of the rows it counted
STALE_MIN = 1_000  # ... and at least as many (a new table's first rows)


def stale(session: Session, tables: Sequence[str] = READ_PATH_TABLES) -> list[tuple[str, int]]:
    """Those of `tables` (found as `ANALYZE` finds them, on the search path) whose rows changed enough since their
    last `ANALYZE` (or since they were made, never analysed), with how many rows changed; only those this role may
    analyse (PostgreSQL 17's MAINTAIN privilege, or before it the owner's role: otherwise `ANALYZE` skips the table
    with a warning)."""
    rows = session.execute(
        text(
            """
            SELECT c.relname, s.n_mod_since_analyze FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
            WHERE s.relid = ANY(ARRAY(SELECT to_regclass(t)::oid FROM unnest(CAST(:tables AS text[])) AS t))
              AND s.n_mod_since_analyze >= greatest(:least, :share * greatest(c.reltuples, 0))
              AND CASE WHEN current_setting('server_version_num')::int >= 170000
                       THEN has_table_privilege(c.oid, 'MAINTAIN')
                       ELSE pg_has_role(c.relowner, 'USAGE') END
            ORDER BY s.relname
            """
        ),
        {"tables": list(tables), "least": STALE_MIN, "share": STALE_SHARE},
    ).all()
    return [(r.relname, int(r.n_mod_since_analyze)) for r in rows]


def refresh(session: Session, tables: Sequence[str] = READ_PATH_TABLES) -> list[tuple[str, int]]:
    """`ANALYZE` each of `tables` that is `stale`; returns those analysed, with the rows changed since their last."""
    due = stale(session, tables)
    for table, _ in due:
        if table not in READ_PATH_TABLES:  # names go into the statement: only ours
            raise ValueError(f"not a table of the read path: {table!r}")
        session.execute(text(f"ANALYZE {table}"))
    return due
