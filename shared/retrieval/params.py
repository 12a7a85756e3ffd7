"""What the read path's stages take besides scoring (`Settings.retrieval`): pool sizes, the gate, the hops."""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.retrieval.evidence import GateParams


@dataclass(frozen=True)
class RetrievalParams:
    """Defaults are the seeds' (RRF k = 60, two hops, top_k x 4 candidates) and the product's."""

    default_k: int = 8
    max_k: int = 200
    # The gate (OM_MIN_SCORE; a request may set its own): the least relevance (a match's similarity component,
    # which salience, recency and use do not move) a memory needs to be returned. 0.1 returns a paraphrase that
    # shares no word with the query (MiniLM cosine ~0.2) and drops what is near no memory (docs/retrieval.md)
    min_score: float = 0.1
    # The evidence gate (MNEMOFLOW_MIN_EVIDENCE; a request may set its own): a query whose best candidate shares too
    # little with it in absolute terms (raw cosine, covered terms, unknown names) returns nothing (evidence.py)
    gate: GateParams = field(default_factory=GateParams)
    candidate_multiplier: int = 4  # each ranker returns k x this candidates
    # kNN always returns neighbours; below this cosine a "neighbour" is noise, not a dense hit.
    dense_min_similarity: float = 0.05
    rrf_k: int = 60
    # Spreading activation over waypoints (OpenMem: both directions, max_hops 2, decay 0.5 per hop, max wins)
    max_hops: int = 2
    # The second hop walks only each memory's this many strongest links (0: all): the graph's tail bounded (at 100k
    # the candidates' p95 161 -> 123) with the same answers on LoCoMo (docs/retrieval.md)
    hop_fanout: int = 2
    # Time anchoring searches the period a query names on its own too: the latest this many memories of it,
    # compared exactly with the query (0 = off)
    period_scan_limit: int = 1_000
    # What the one statement needs first (the query terms' statistics, the compressed rungs' probe) is read on a
    # second connection while the query is embedded; its threads per process. 0 reads it after, on one connection.
    parallel_threads: int = 16
