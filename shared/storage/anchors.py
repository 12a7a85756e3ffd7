"""Anchors of the fresh tier's codes (migrations 0021, 0022, 0024, 0025): trained per model and dimension, every
code assigned.

The first pass over a tenant's fresh vectors ranks their binary codes by Hamming distance; with tens of thousands
waiting (a bulk import draining into the index) it read them all on every query. Each code is assigned to the
nearest of `ANCHORS` anchors as it is written (by the engine's writer with `filings`, by the triggers for any other
statement); a query of a tenant with many fresh codes reads the codes of the anchors nearest the query
(`mnemoflow_fresh`). This module makes the anchors: spherical k-means over a sample of the fresh vectors (centroids
by cosine distance, as the vectors are compared), once a model's fresh codes of one dimension first number `CROWD`,
and assigns the codes written before they existed.

They are made again when the fresh tier, crowded again, has drifted from the sample they were trained on (another
tenant's import, another domain: its codes would crowd into a few lists, each query reading them): `drifted`
compares how the fresh codes spread over the anchors with how the training sample did, and past `DRIFT` the merge
cycle trains a new generation. Each generation's anchors are numbered apart from the last one's (migration 0022), so
a code filed under a replaced anchor (a writer that saw the old ones) is known to be stale: queries read it like an
unfiled one, and `assign_waiting` files it again.

Anchors are means of many vectors, no text and no tenant's, like an index's own pages: a store's, not a tenant's.

Centroids of the vectors, not majority codes of the codes: on LoCoMo's and SciFact's texts (the local model) the
first pass over the codes of the anchors nearest a query by Hamming distance found 80-83 % of its exact ten nearest
at a seventh of the codes read; over those of the nearest centroids by cosine, 93-95 % at 128 anchors, 16 read,
96-97 % at 24 read (a fifth of the codes), against 99 % reading all (docs/experiments.md). 256 anchors with 32 read
(the default since migration 0025) find as many as 128 with 24 while reading a third fewer codes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
from pgvector import Vector
from sqlalchemy import Connection, text
from sqlalchemy.orm import Session

from shared.db import read_rows

ANCHORS = 256  # anchors per model and dimension (a query reads 32: migration 0025)
CROWD = 10_000  # fresh codes of one model and dimension from which anchors are trained (migration 0021's CROWD)
SAMPLE = 16_384  # fresh vectors the training reads
ROUNDS = 10  # k-means rounds
ASSIGN_BATCH = 20_000  # codes assigned per statement
TIDY_AFTER = 1_000  # codes filed in one run from which `fresh_codes` is vacuumed and analysed after
DRIFT = 0.5  # the share of the fresh codes that must sit in other lists than the training sample's for a retraining
NUMBERS = 32_768 - 32_768 % ANCHORS  # anchor numbers (smallint's non-negative range), ANCHORS to a generation


class Trained(NamedTuple):
    model: str
    dim: int
    vectors: int  # sampled vectors trained on
    first: int  # the generation's first anchor number


class Filing(NamedTuple):
    """One generation of a model and dimension's anchors, as a writer files codes under them."""

    numbers: np.ndarray  # the anchors' numbers
    centroids: np.ndarray  # their centroids, unit rows (float32), in the same order

    def nearest(self, vectors: np.ndarray) -> np.ndarray:
        """The number of the anchor of largest cosine to each row of `vectors`: what the triggers' `ORDER BY
        centroid <=> embedding LIMIT 1` finds, up to float rounding between two equally near anchors."""
        return self.numbers[(np.asarray(vectors, dtype=np.float32) @ self.centroids.T).argmax(axis=1)]


class Drift(NamedTuple):
    model: str
    dim: int
    codes: int  # fresh codes of the model and dimension, filed under its anchors
    drift: float  # total variation between their spread over the anchors and the training sample's


def spherical_kmeans(sample: np.ndarray, k: int, *, rounds: int = ROUNDS, seed: int = 0) -> np.ndarray:
    """`k` unit centroids of the rows of `sample` (at least `k` of them, none zero), seeded as k-means++ does (each
    next seed a row drawn with probability growing with the square of its cosine distance to the seeds so far, so
    that two seeds rarely share a cluster); then each round assigns every row to the centroid of largest cosine and
    makes each centroid its rows' normalised mean (one left without rows keeps its place)."""
    rng = np.random.default_rng(seed)
    rows = sample / np.linalg.norm(sample, axis=1, keepdims=True)
    centroids = np.empty((k, rows.shape[1]), dtype=rows.dtype)
    centroids[0] = rows[rng.integers(len(rows))]
    distance = np.maximum(1.0 - rows @ centroids[0], 0.0)
    for i in range(1, k):
        weights = distance**2
        total = float(weights.sum())
        pick = rng.choice(len(rows), p=weights / total) if total > 0 else rng.integers(len(rows))
        centroids[i] = rows[pick]
        distance = np.minimum(distance, np.maximum(1.0 - rows @ centroids[i], 0.0))
    for _ in range(rounds):
        nearest = (rows @ centroids.T).argmax(axis=1)
        sums = np.zeros_like(centroids)
        np.add.at(sums, nearest, rows)
        norms = np.linalg.norm(sums, axis=1)
        filled = norms > 0
        centroids[filled] = sums[filled] / norms[filled, None]
    return centroids


def untrained(session: Session) -> list[tuple[str, int]]:
    """The sectors' (model, dim) pairs with at least CROWD fresh codes and no anchors (counted up to CROWD)."""
    rows = session.execute(
        text(
            """
            SELECT c.model, c.dim FROM (SELECT DISTINCT model, dim FROM sector_models) c
            WHERE NOT EXISTS (SELECT 1 FROM fresh_anchors f WHERE f.model = c.model AND f.dim = c.dim)
              AND (SELECT count(*) FROM (SELECT 1 FROM fresh_codes x WHERE x.model = c.model AND x.dim = c.dim
                                         LIMIT :crowd) n) >= :crowd
            """
        ),
        {"crowd": CROWD},
    ).all()
    return [(r.model, int(r.dim)) for r in rows]


def shares(sample: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """The fraction of the rows of `sample` nearest each of `centroids` by cosine (the rows need not be unit)."""
    nearest = (sample @ centroids.T).argmax(axis=1)
    return np.bincount(nearest, minlength=len(centroids)) / max(len(sample), 1)


def total_variation(trained: Sequence[float | None], filed: Sequence[int]) -> float:
    """Half the sum of the differences between two spreads over the same anchors: `trained`, the training sample's
    share of each (None where unknown: anchors of migration 0021, taken as even), and `filed`, the codes filed under
    each now. 0 when the fresh codes spread as the sample did; 1 when they all sit in lists the sample left empty."""
    total = sum(filed)
    if not total or not trained:
        return 0.0
    even = 1.0 / len(trained)
    return 0.5 * sum(
        abs(n / total - (even if share is None else share)) for share, n in zip(trained, filed, strict=True)
    )


def next_generation(before: int | None) -> int:
    """The first number of the generation after the one whose first number is `before` (None: the first one): the
    next multiple of ANCHORS above it, cycling through smallint's range, so a generation's numbers never pass 32,767
    even after one of an earlier size (128 anchors before migration 0025)."""
    return 0 if before is None else (before // ANCHORS + 1) * ANCHORS % NUMBERS


def train(session: Session, model: str, dim: int) -> Trained | None:
    """Make the anchors of (`model`, `dim`) from a sample of its fresh vectors, as a new generation replacing any
    before it (numbered after them, so codes filed under the old ones are known to be stale); the caller holds the
    merge's lock (`Lock.MERGE`), so one run trains at a time. None if the sample is too small."""
    rows = read_rows(
        session,
        """
        SELECT v.embedding FROM (SELECT sector, memory_id FROM fresh_codes WHERE model = :m AND dim = :d
                                 ORDER BY random() LIMIT :n) c
        JOIN memory_vectors v ON v.sector = c.sector AND v.memory_id = c.memory_id
        """,
        {"m": model, "d": dim, "n": SAMPLE},
    )
    sample = np.array([r.embedding.to_numpy() for r in rows], dtype=np.float32).reshape(len(rows), dim)
    sample = sample[np.linalg.norm(sample, axis=1) > 0]
    if len(sample) < ANCHORS:
        return None
    centroids = spherical_kmeans(sample, ANCHORS)
    before = session.execute(
        text("SELECT min(anchor) FROM fresh_anchors WHERE model = :m AND dim = :d"), {"m": model, "d": dim}
    ).scalar()
    first = next_generation(None if before is None else int(before))
    session.execute(text("DELETE FROM fresh_anchors WHERE model = :m AND dim = :d"), {"m": model, "d": dim})
    session.execute(
        text(
            "INSERT INTO fresh_anchors (model, dim, anchor, centroid, share) "
            "SELECT :m, :d, :first + a.n - 1, a.centroid, a.share "
            "FROM unnest(CAST(:centroids AS vector[]), CAST(:shares AS real[])) "
            "WITH ORDINALITY AS a(centroid, share, n)"
        ),
        {
            "m": model,
            "d": dim,
            "first": first,
            "centroids": [Vector(c) for c in centroids],
            "shares": [float(x) for x in shares(sample, centroids)],
        },
    )
    return Trained(model, dim, len(sample), first)


# per process: the anchors last read from each database, by (database, model, dim), with the version they were read
# at (the generation's first number, its size, and the newest row's transaction)
_filings: dict[tuple[str, str, int], tuple[tuple[int, int, int], Filing]] = {}


def filings(session: Session) -> dict[tuple[str, int], Filing]:
    """The current anchors of every (model, dim), for a writer to file its fresh codes under (`copy_vectors`):
    one small statement, and the centroids read again only where a generation was trained since the last call.

    A writer that read a generation just before it was replaced files its codes under numbers outside the new one:
    they are read as stale and filed again by the merge (migration 0022), as a trigger's would be."""
    database = cache_database(session)
    rows = session.execute(
        text(
            "SELECT model, dim, min(anchor) AS first, count(*) AS n, max(xmin::text::bigint) AS made "
            "FROM fresh_anchors GROUP BY model, dim"
        )
    ).all()
    found = {}
    for r in rows:
        key, version = (database, r.model, int(r.dim)), (int(r.first), int(r.n), int(r.made))
        known = _filings.get(key)
        if known is None or known[0] != version:
            known = (version, _read_filing(session, r.model, int(r.dim)))
            _filings[key] = known
        found[(r.model, int(r.dim))] = known[1]
    return found


def cache_database(session: Session) -> str:
    """The database `session` talks to, as `filings` keys its process cache (its URL without the password)."""
    return session.connection().engine.url.render_as_string(hide_password=True)


def _read_filing(session: Session, model: str, dim: int) -> Filing:
    rows = read_rows(
        session,
        "SELECT anchor, centroid FROM fresh_anchors WHERE model = :m AND dim = :d ORDER BY anchor",
        {"m": model, "d": dim},
    )
    centroids = np.array([r.centroid.to_numpy() for r in rows], dtype=np.float32).reshape(len(rows), dim)
    norms = np.linalg.norm(centroids, axis=1, keepdims=True)
    return Filing(np.array([int(r.anchor) for r in rows], dtype=np.int64), centroids / np.where(norms > 0, norms, 1.0))


def drifted(session: Session, *, threshold: float = DRIFT) -> list[Drift]:
    """The (model, dim) pairs whose anchors the fresh tier has drifted from (`total_variation` above `threshold`),
    among those crowded again (at least CROWD fresh codes) with every code filed under the current generation (none
    stale: a new generation waits for the last one's codes to be filed, so numbers never meet again across the
    cycle). One pass over each crowded pair's codes, grouped by anchor."""
    rows = session.execute(
        text(
            """
            WITH pairs AS (
                SELECT model, dim FROM fresh_anchors GROUP BY model, dim
            ), crowded AS (
                SELECT p.model, p.dim FROM pairs p
                WHERE (SELECT count(*) FROM (SELECT 1 FROM fresh_codes x WHERE x.model = p.model AND x.dim = p.dim
                                             LIMIT :crowd) n) >= :crowd
            ), filed AS (
                SELECT c.model, c.dim, c.anchor, count(*) AS n
                FROM fresh_codes c JOIN crowded USING (model, dim) GROUP BY c.model, c.dim, c.anchor
            )
            SELECT k.model, k.dim, f.anchor, f.share, coalesce(n.n, 0) AS n, false AS stale
            FROM crowded k JOIN fresh_anchors f USING (model, dim)
            LEFT JOIN filed n ON n.model = k.model AND n.dim = k.dim AND n.anchor = f.anchor
            UNION ALL
            SELECT n.model, n.dim, n.anchor, NULL, n.n, true FROM filed n
            WHERE n.anchor IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM fresh_anchors f WHERE f.model = n.model AND f.dim = n.dim AND f.anchor = n.anchor)
            ORDER BY 1, 2, 3
            """
        ),
        {"crowd": CROWD},
    ).all()
    pairs: dict[tuple[str, int], list[Any]] = {}
    for r in rows:
        pairs.setdefault((r.model, int(r.dim)), []).append(r)
    found = []
    for (model, dim), anchors_of in pairs.items():
        if any(r.stale for r in anchors_of):
            continue
        drift = total_variation([r.share for r in anchors_of], [int(r.n) for r in anchors_of])
        if drift > threshold:
            found.append(Drift(model, dim, sum(int(r.n) for r in anchors_of), drift))
    return found


def assign_waiting(session: Session, *, limit: int = ASSIGN_BATCH) -> int:
    """Assign up to `limit` codes not filed under one of their model and dimension's anchors (written before they
    were made, or by a statement that began before, or filed under a generation since replaced); returns how many."""
    result = session.execute(
        text(
            """
            WITH waiting AS (
                SELECT c.sector, c.memory_id FROM fresh_codes c
                WHERE EXISTS (SELECT 1 FROM fresh_anchors f WHERE f.model = c.model AND f.dim = c.dim)
                  AND NOT EXISTS (SELECT 1 FROM fresh_anchors f
                                  WHERE f.model = c.model AND f.dim = c.dim AND f.anchor = c.anchor)
                LIMIT :limit FOR UPDATE SKIP LOCKED
            )
            UPDATE fresh_codes c
            SET anchor = (SELECT f.anchor FROM fresh_anchors f WHERE f.model = c.model AND f.dim = c.dim
                          ORDER BY f.centroid <=> v.embedding LIMIT 1)
            FROM waiting w JOIN memory_vectors v ON v.sector = w.sector AND v.memory_id = w.memory_id
            WHERE c.sector = w.sector AND c.memory_id = w.memory_id
            """
        ),
        {"limit": limit},
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def tidy(connection: Connection) -> None:
    """`VACUUM (ANALYZE) fresh_codes`, on `connection` in autocommit (a VACUUM runs outside a transaction): after
    filing a crowd of codes at once, their old versions' index entries are dead and the statistics say nothing is
    filed, so the first pass read twice the pages, or every code on a plan made from those statistics, until
    autovacuum came by. Tens of milliseconds at 100,000 codes. Needs PostgreSQL 17's MAINTAIN privilege (migration
    0022); an older server only warns and skips it, leaving it to autovacuum."""
    connection.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM (ANALYZE) fresh_codes"))
