"""Token-aware chunking of extracted elements, each chunk carrying the metadata of the elements it holds.

Sizes are in estimated tokens (shared.text.estimate_tokens, CJK-aware), so a chunk fits an embedding
window without running a tokenizer here. Defaults are OpenMemory's ingestion config (architecture seed
§5): chunk_size 2048, chunk_overlap 256, preserve_metadata true. Pure and deterministic: the same
elements always give the same chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from shared.errors import InvalidInput
from shared.ingest.elements import Element, TextBudget
from shared.ingest.params import IngestParams
from shared.text import estimate_tokens, iter_windows, tail_by_estimate

DEFAULT_CHUNK_SIZE = IngestParams.chunk_size
DEFAULT_CHUNK_OVERLAP = IngestParams.chunk_overlap
SEPARATOR = "\n\n"
# Upper bound of what one SEPARATOR adds to the estimate when joined between two texts.
_SEPARATOR_TOKENS = 1


@dataclass(frozen=True, slots=True)
class Chunk:
    """Consecutive element text, at most `chunk_size` estimated tokens (`tokens` is its estimate)."""

    index: int
    text: str
    tokens: int
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Piece:
    text: str
    tokens: int
    element: int  # index in the input list
    kind: str
    headings: tuple[str, ...]  # the heading path in force at this piece
    overlap: bool = False  # repeated from the previous chunk


def chunk_elements(
    elements: Sequence[Element],
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    preserve_metadata: bool = True,
    document_metadata: Mapping[str, Any] | None = None,
    max_chunks: int | None = None,
    max_chars: int | None = None,
) -> list[Chunk]:
    """Pack elements in order into chunks of at most `chunk_size` estimated tokens.

    A chunk cut for size starts with the last ~`chunk_overlap` tokens of the one before, so a sentence
    cut at the boundary survives whole in one of them. A Title starts a new chunk (without overlap: a
    new section needs no tail of the last one) once the current chunk holds a quarter of `chunk_size`,
    so sections are not fused into one chunk while tiny sections are not emitted one by one either.
    An element longer than `chunk_size` is split into overlapping windows between words.

    With `preserve_metadata`, each chunk's metadata names its element range, element types, pages,
    sheet names, heading path, start/end seconds (transcripts) and, under "document", `document_metadata`.

    Limits (InvalidInput, raised as soon as one is passed, before the rest is chunked): elements of more than
    `max_chars` characters, more than `max_chunks` chunks, or chunks holding more than twice `max_chars` between
    them (an overlap near the chunk size repeats the text many times over).
    """
    if chunk_size <= 0 or not 0 <= chunk_overlap < chunk_size:
        raise InvalidInput(f"need chunk_size > 0 and 0 <= chunk_overlap < chunk_size, got {chunk_size}/{chunk_overlap}")
    builder = _Builder(elements, chunk_size, chunk_overlap, max_chunks, max_chars)
    budget = TextBudget(max_chars)
    headings: tuple[str, ...] = ()
    for position, element in enumerate(elements):
        text = element.text.strip()
        if not text:
            continue
        budget.take(len(text))
        if element.kind == "Title":
            headings = _push_heading(headings, text, element.metadata.get("category_depth"))
            if builder.new_tokens() >= chunk_size // 4:
                builder.flush(overlap=False)
        piece = _Piece(text, estimate_tokens(text), position, element.kind, headings)
        if piece.tokens > chunk_size:
            builder.add_oversized(piece)
        else:
            builder.add(piece)
    builder.flush(overlap=False)
    return [
        Chunk(
            index=index,
            text=SEPARATOR.join(p.text for p in pieces),
            tokens=estimate_tokens(SEPARATOR.join(p.text for p in pieces)),
            metadata=_metadata(pieces, elements, document_metadata) if preserve_metadata else {},
        )
        for index, pieces in enumerate(builder.chunks)
    ]


def bound_by_tokens(
    chunks: Sequence[Chunk],
    count_tokens: Callable[[Sequence[str]], list[int]],
    chunk_size: int,
    *,
    max_chunks: int | None = None,
) -> list[Chunk]:
    """`chunks` with each one over `chunk_size` tokens of the model (`count_tokens`, its tokenizer) cut into parts
    that are not, renumbered: the estimate counts four characters a token, and a chunk of punctuation or code is
    up to four times that many (2,048 estimated tokens of `|` are 8,192 of MiniLM's). Each part keeps its chunk's
    metadata. InvalidInput when the parts pass `max_chunks`."""
    bounded: list[tuple[tuple[int, ...], Chunk]] = []
    pending: list[tuple[tuple[int, ...], Chunk]] = [
        ((chunk.index,), chunk) for chunk in chunks
    ]  # (place in the document, chunk)
    for _ in range(4):  # a part cut by the average ratio may still be over where the text is uneven: cut again
        counts = count_tokens([c.text for _, c in pending]) if pending else []
        over: list[tuple[tuple[int, ...], Chunk]] = []
        for (place, chunk), tokens in zip(pending, counts, strict=True):
            if tokens <= chunk_size:
                bounded.append((place, chunk))
                continue
            parts = _cut(chunk.text, max(1, len(chunk.text) * chunk_size // tokens))
            over.extend(((*place, j), replace(chunk, text=t, tokens=estimate_tokens(t))) for j, t in enumerate(parts))
        pending = over
        if not pending:
            break
    bounded.extend(pending)
    bounded.sort(key=lambda placed: placed[0])
    if max_chunks is not None and len(bounded) > max_chunks:
        raise InvalidInput(
            f"the document makes more than {max_chunks:,} chunks of {chunk_size:,} tokens of the embedding model, "
            "the limit per document (MNEMOFLOW_INGEST_MAX_CHUNKS): send a larger config.chunk_size, or split it",
            details={"limit": "chunks", "max_chunks": max_chunks, "chunk_size": chunk_size},
        )
    return [replace(chunk, index=i) for i, (_, chunk) in enumerate(bounded)]


def _cut(text: str, most: int) -> list[str]:
    """`text` in consecutive parts of at most `most` characters, each cut after its last whitespace when that
    falls in its second half (a long run of punctuation has none: it is cut where it reaches `most`)."""
    parts = []
    while len(text) > most:
        end = most
        space = max(text.rfind(" ", 0, most), text.rfind("\n", 0, most))
        if space >= most // 2:
            end = space + 1
        parts.append(text[:end].strip())
        text = text[end:]
    parts.append(text.strip())
    return [part for part in parts if part]


class _Builder:
    """The chunk being filled, and the chunks already closed (as lists of pieces)."""

    def __init__(
        self,
        elements: Sequence[Element],
        chunk_size: int,
        chunk_overlap: int,
        max_chunks: int | None = None,
        max_chars: int | None = None,
    ) -> None:
        self.elements = elements
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self.max_chunks = max_chunks
        self.max_chunk_chars = None if max_chars is None else 2 * max_chars
        self.current: list[_Piece] = []
        self.chunks: list[list[_Piece]] = []
        self.chunk_chars = 0

    def close(self, pieces: list[_Piece]) -> None:
        """Add a finished chunk; InvalidInput when it is one too many, or its text one repetition too much."""
        self.chunks.append(pieces)
        self.chunk_chars += sum(len(p.text) for p in pieces) + len(SEPARATOR) * (len(pieces) - 1)
        if self.max_chunks is not None and len(self.chunks) > self.max_chunks:
            raise InvalidInput(
                f"the document makes more than {self.max_chunks:,} chunks of {self.chunk_size:,} tokens, the limit "
                "per document (MNEMOFLOW_INGEST_MAX_CHUNKS): send a larger config.chunk_size, or split the document",
                details={"limit": "chunks", "max_chunks": self.max_chunks, "chunk_size": self.chunk_size},
            )
        if self.max_chunk_chars is not None and self.chunk_chars > self.max_chunk_chars:
            raise InvalidInput(
                f"the document's chunks would repeat too much of it: more than {self.max_chunk_chars:,} characters "
                f"(twice MNEMOFLOW_INGEST_MAX_CHARS) with chunk_overlap {self.chunk_overlap:,} in chunks of "
                f"{self.chunk_size:,} tokens: send a smaller config.chunk_overlap",
                details={"limit": "chunk_chars", "max_chunk_chars": self.max_chunk_chars},
            )

    def tokens(self) -> int:
        return sum(p.tokens for p in self.current) + _SEPARATOR_TOKENS * max(len(self.current) - 1, 0)

    def new_tokens(self) -> int:
        return sum(p.tokens for p in self.current if not p.overlap)

    def add(self, piece: _Piece) -> None:
        if self.current and self.tokens() + _SEPARATOR_TOKENS + piece.tokens > self.chunk_size:
            self.flush(overlap=True, room_for=piece.tokens)
            # The estimate of a cut tail can exceed its budget by a token; carried headings may not fit either.
            while self.current and self.tokens() + _SEPARATOR_TOKENS + piece.tokens > self.chunk_size:
                if self.current[0].overlap:
                    self.current.pop(0)
                else:
                    self.flush(overlap=False)
        self.current.append(piece)

    def add_oversized(self, piece: _Piece) -> None:
        self.flush(overlap=False, carry_titles=False)
        windows = iter_windows(piece.text, self.chunk_size, self.chunk_overlap)  # one at a time: limits stop it
        last = next(windows)
        for window in windows:
            self.close([_with_text(piece, last)])
            last = window
        # The last window stays open so that following small elements can join it.
        self.current = [_with_text(piece, last)]

    def flush(self, *, overlap: bool, room_for: int = 0, carry_titles: bool = True) -> None:
        """Close the current chunk; with `overlap`, open the next one with its tail (leaving `room_for` tokens).

        With `carry_titles`, headings at the end of the chunk move to the next one, with the text they head.
        """
        if not any(not p.overlap for p in self.current):
            self.current = []
            return
        closing = self.current
        carried: list[_Piece] = []
        while carry_titles and len(closing) > 1 and closing[-1].kind == "Title" and not closing[-1].overlap:
            carried.insert(0, closing.pop())
        self.close(closing)
        self.current = carried
        if overlap and not carried:
            budget = min(self.chunk_overlap, self.chunk_size - room_for - _SEPARATOR_TOKENS)
            self.current = _tail(closing, budget)


def _tail(pieces: list[_Piece], budget: int) -> list[_Piece]:
    """The last pieces of a chunk fitting `budget` tokens, the earliest one cut at a word if needed."""
    tail: list[_Piece] = []
    for piece in reversed(pieces):
        cost = piece.tokens + (_SEPARATOR_TOKENS if tail else 0)
        if cost <= budget:
            tail.insert(0, _as_overlap(piece, piece.text))
            budget -= cost
            continue
        text = tail_by_estimate(piece.text, budget - (_SEPARATOR_TOKENS if tail else 0))
        if text:
            tail.insert(0, _as_overlap(piece, text))
        break
    return tail


def _with_text(piece: _Piece, text: str) -> _Piece:
    return _Piece(text, estimate_tokens(text), piece.element, piece.kind, piece.headings, piece.overlap)


def _as_overlap(piece: _Piece, text: str) -> _Piece:
    return _Piece(text, estimate_tokens(text), piece.element, piece.kind, piece.headings, overlap=True)


def _push_heading(headings: tuple[str, ...], title: str, depth: Any) -> tuple[str, ...]:
    level = depth if isinstance(depth, int) and depth >= 0 else 0
    return (*headings[:level], title)


def _metadata(
    pieces: list[_Piece], elements: Sequence[Element], document_metadata: Mapping[str, Any] | None
) -> dict[str, Any]:
    sources = [elements[i] for i in sorted({p.element for p in pieces})]
    new = [p for p in pieces if not p.overlap]
    # The heading path of the chunk's first body text: a chunk opening "Guide / Intro / text" is under Guide > Intro.
    first_body = next((p for p in new if p.kind != "Title"), new[0])
    metadata: dict[str, Any] = {
        "element_range": [pieces[0].element, pieces[-1].element],
        "element_types": list(dict.fromkeys(p.kind for p in pieces)),
        "headings": list(first_body.headings),
        "overlap_tokens": sum(p.tokens for p in pieces if p.overlap),
    }
    pages = sorted({e.metadata["page_number"] for e in sources if isinstance(e.metadata.get("page_number"), int)})
    if pages:
        metadata["page_numbers"] = pages
    sheets = list(dict.fromkeys(e.metadata["page_name"] for e in sources if e.metadata.get("page_name")))
    if sheets:
        metadata["page_names"] = sheets
    starts = [e.metadata["start"] for e in sources if isinstance(e.metadata.get("start"), int | float)]
    ends = [e.metadata["end"] for e in sources if isinstance(e.metadata.get("end"), int | float)]
    if starts and ends:
        metadata["start"], metadata["end"] = min(starts), max(ends)
    if document_metadata:
        metadata["document"] = dict(document_metadata)
    return metadata
