"""Extractive digests of a tenant's memories, no model: the terms they share, the memories that best represent each
sector, and a user summary that says both (`GET /users/{id}/summary`; docs/compatibility.md#user-summaries).

A memory represents its sector when it is salient and central: its terms are the ones its sector's memories share
(the terms weighted by how many of them carry each term, each counted by its salience). Highlights are picked
greedily, a near-copy of one already picked (Jaccard similarity of their terms above `SummaryParams.similar`)
passed over, as OpenMemory's clustering of a user's memories does. Pure.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from shared.api.common import SECTORS
from shared.lifecycle.compression import STOPWORDS, words

NO_MEMORIES = "no memories yet"


@dataclass(frozen=True)
class SummaryParams:
    """How a user summary is built (MNEMOFLOW_USER_SUMMARY_*)."""

    memories_per_sector: int = 100  # the most salient of each sector are read; the counts cover them all
    highlights: int = 3  # memories quoted per sector
    terms: int = 10  # top terms named
    line_chars: int = 160  # a quoted memory is cut to this many characters
    similar: float = 0.6  # a highlight whose terms overlap a picked one's more than this is a near-copy


@dataclass(frozen=True)
class MemoryLine:
    """What a digest reads of a memory."""

    id: str
    content: str
    sector: str  # its primary sector
    salience: float


@dataclass(frozen=True)
class Highlight:
    id: str
    content: str  # cut to `line_chars`
    salience: float


@dataclass(frozen=True)
class SectorDigest:
    sector: str
    count: int  # the tenant's memories of this primary sector (all of them, not only those read)
    highlights: tuple[Highlight, ...]


@dataclass(frozen=True)
class Digest:
    memory_count: int
    reflection_count: int
    sectors: tuple[SectorDigest, ...]  # the sectors that have memories, the most populous first
    top_terms: tuple[str, ...]
    text: str


def terms(text: str) -> frozenset[str]:
    """The words of a text that say something: lower-cased, no stopwords, no numbers, longer than two letters."""
    return frozenset(w for w in words(text) if len(w) > 2 and w not in STOPWORDS and not w.isdigit())


def cut(text: str, chars: int) -> str:
    """`text` on one line, cut to `chars` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= chars else flat[: max(0, chars - 3)].rstrip() + "..."


def term_weights(documents: Iterable[tuple[frozenset[str], float]]) -> dict[str, float]:
    """Each term's weight: how many documents carry it, each counted as 1 + its weight (salience)."""
    weights: dict[str, float] = defaultdict(float)
    for document_terms, weight in documents:
        for term in document_terms:
            weights[term] += 1.0 + weight
    return weights


def top_terms(documents: Sequence[tuple[frozenset[str], float]], n: int, *, min_documents: int = 1) -> list[str]:
    """The `n` terms the documents share most (`term_weights`), of those in at least `min_documents` of them; ties
    alphabetically, so the result is stable."""
    weights = term_weights(documents)
    if min_documents > 1:
        carried = term_weights((document_terms, 0.0) for document_terms, _ in documents)
        weights = {t: w for t, w in weights.items() if carried[t] >= min_documents}
    return sorted(weights, key=lambda t: (-weights[t], t))[:n]


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard similarity of two term sets (0 when either is empty)."""
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def representatives(lines: Sequence[MemoryLine], k: int, *, similar: float = 0.6) -> list[MemoryLine]:
    """The `k` lines that best represent the group: half salience, half centrality (how much of the group's shared
    weight its terms carry, over the square root of how many terms it has, relative to the most central line);
    a line too similar to one already picked is passed over. Best first."""
    if k <= 0 or not lines:
        return []
    sets = [terms(line.content) for line in lines]
    weights = term_weights(zip(sets, (line.salience for line in lines), strict=True))
    central = [sum(weights[t] for t in s) / math.sqrt(len(s)) if s else 0.0 for s in sets]
    top = max(central) or 1.0
    score = [0.5 * line.salience + 0.5 * c / top for line, c in zip(lines, central, strict=True)]
    order = sorted(range(len(lines)), key=lambda i: (-score[i], i))
    picked: list[int] = []
    for i in order:
        if all(similarity(sets[i], sets[j]) <= similar for j in picked):
            picked.append(i)
        if len(picked) == k:
            break
    return [lines[i] for i in picked]


def summarize(lines: Sequence[MemoryLine], counts: Mapping[str, int], params: SummaryParams) -> Digest:
    """A user's digest from the memories read (`lines`, the most salient of each sector) and the counts of all of
    their memories by primary sector."""
    total = sum(counts.values())
    reflections = counts.get("reflective", 0)
    if total == 0:
        return Digest(0, 0, (), (), NO_MEMORIES)
    by_sector: dict[str, list[MemoryLine]] = {}
    for line in lines:
        by_sector.setdefault(line.sector, []).append(line)
    populated = sorted((s for s in counts if counts[s] > 0), key=lambda s: (-counts[s], _rank(s)))
    sectors = tuple(
        SectorDigest(
            sector,
            counts[sector],
            tuple(
                Highlight(line.id, cut(line.content, params.line_chars), line.salience)
                for line in representatives(by_sector.get(sector, []), params.highlights, similar=params.similar)
            ),
        )
        for sector in populated
    )
    shared = top_terms([(terms(line.content), line.salience) for line in lines], params.terms)
    return Digest(total, reflections, sectors, tuple(shared), summary_text(total, sectors, shared))


def summary_text(total: int, sectors: Sequence[SectorDigest], shared: Sequence[str]) -> str:
    """The digest as the summary a person reads: counts, top terms, then each sector's quoted highlights."""
    noun = "memory" if total == 1 else "memories"
    by_sector = ", ".join(f"{d.sector} {d.count}" for d in sectors)
    lines = [f"{total} {noun} ({by_sector})."]
    if shared:
        lines.append("Top terms: " + ", ".join(shared) + ".")
    for digest in sectors:
        if digest.highlights:
            lines.append(f"{digest.sector}: " + "; ".join(f'"{h.content}"' for h in digest.highlights))
    return "\n".join(lines)


def _rank(sector: str) -> int:
    return SECTORS.index(sector) if sector in SECTORS else len(SECTORS)
