"""Anchors of the fresh tier's codes (migration 0021): trained once per model and dimension, then every code assigned.

The first pass over a tenant's fresh vectors ranks their binary codes by Hamming distance; with tens of thousands
waiting (a bulk import draining into the index) it read them all on every query. Each code is assigned to the
nearest of `ANCHORS` anchors as it is written (the triggers); a query of a tenant with many fresh codes reads the
codes of the anchors nearest the query (`mnemoflow_fresh`). This module makes the anchors: spherical k-means over a
sample of the fresh vectors (centroids by cosine distance, as the vectors are compared), once a model's fresh codes
of one dimension first number `CROWD`, and assigns the codes written before they existed.

Anchors are kept once made: every assignment refers to them. They are means of many vectors, no text and no
tenant's, like an index's own pages: a store's, not a tenant's.

Centroids of the vectors, not majority codes of the codes: on LoCoMo's and SciFact's texts (the local model) the
first pass over the codes of the anchors nearest a query by Hamming distance found 80-83 % of its exact ten nearest
at a seventh of the codes read; over those of the nearest centroids by cosine, 93-95 % at 128 anchors, 16 read,
96-97 % at 24 read (a fifth of the codes, the default), against 99 % reading all (docs/experiments.md).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from pgvector import Vector
from sqlalchemy import text
from sqlalchemy.orm import Session

from shared.db import read_rows

ANCHORS = 128  # anchors per model and dimension
CROWD = 10_000  # fresh codes of one model and dimension from which anchors are trained (migration 0021's CROWD)
SAMPLE = 16_384  # fresh vectors the training reads
ROUNDS = 10  # k-means rounds
ASSIGN_BATCH = 20_000  # codes assigned per statement


class Trained(NamedTuple):
    model: str
    dim: int
    vectors: int  # sampled vectors trained on


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


def train(session: Session, model: str, dim: int) -> Trained | None:
    """Make the anchors of (`model`, `dim`) from a sample of its fresh vectors, unless they exist; the caller holds
    the merge's lock (`Lock.MERGE`), so one run trains at a time."""
    made = session.execute(
        text("SELECT 1 FROM fresh_anchors WHERE model = :m AND dim = :d LIMIT 1"), {"m": model, "d": dim}
    ).first()
    if made:
        return None
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
    session.execute(
        text(
            "INSERT INTO fresh_anchors (model, dim, anchor, centroid) "
            "SELECT :m, :d, a.n - 1, a.centroid FROM unnest(CAST(:centroids AS vector[])) WITH ORDINALITY "
            "AS a(centroid, n)"
        ),
        {"m": model, "d": dim, "centroids": [Vector(c) for c in centroids]},
    )
    return Trained(model, dim, len(sample))


def assign_waiting(session: Session, *, limit: int = ASSIGN_BATCH) -> int:
    """Assign up to `limit` codes without an anchor whose model and dimension have anchors (written before they
    were made, or by a statement that began before); returns how many."""
    result = session.execute(
        text(
            """
            WITH waiting AS (
                SELECT c.sector, c.memory_id FROM fresh_codes c
                WHERE c.anchor IS NULL
                  AND EXISTS (SELECT 1 FROM fresh_anchors f WHERE f.model = c.model AND f.dim = c.dim)
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
