"""Text helpers: normalisation for dedup, content and fact hashes, the CJK-aware token estimate, opaque labels."""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import unicodedata
from collections import deque
from collections.abc import Iterator

_WHITESPACE = re.compile(r"\s+")
# Characters a tokenizer spends about one token on each (membox's estimate counts them singly).
_CJK_RANGES = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3000-\u303f"  # CJK symbols and punctuation
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30ff"  # Katakana
    "\u3130-\u318f"  # Hangul compatibility Jamo
    "\u3400-\u4dbf"  # CJK Unified Ideographs Extension A
    "\u4e00-\u9fff"  # CJK Unified Ideographs
    "\uac00-\ud7af"  # Hangul syllables
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uff00-\uffef"  # half-width and full-width forms
    "\U00020000-\U0003134f"  # CJK Unified Ideographs Extensions B-G and compatibility supplement
)
_CJK = re.compile(f"[{_CJK_RANGES}]")
# Units a window boundary may fall between: one CJK character, or a run of up to 64 other non-space characters.
_PIECE = re.compile(f"[{_CJK_RANGES}]|[^\\s{_CJK_RANGES}]{{1,64}}")


def normalize_content(text: str) -> str:
    """NFKC, whitespace runs folded to one space, trimmed; case is kept so dedup stays exact."""
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip()


def content_hash(text: str) -> str:
    """sha256 hex of the normalised content: equal hashes mean the same memory."""
    return hash_normalized(normalize_content(text))


def hash_normalized(normalized: str) -> str:
    """content_hash of a text already passed through normalize_content."""
    return hashlib.sha256(normalized.encode("utf-8")).hexdigest()


_WORD = re.compile(r"[\w'-]+")
# Longer texts (a document's chunk) are one fact only as the same words in the same order.
FACT_KEY_MAX_WORDS = 64


def fact_key(normalized: str) -> str:
    """What texts that say one thing in other case, punctuation or order of parts have in common: their words,
    case folded and punctuation dropped, read as a cycle from its least rotation. A moved phrase keeps the cycle
    ("In the morning Alice likes green tea" / "Alice likes green tea in the morning"; two sentences swapped), any
    other change breaks it ("from Paris to Berlin" / "from Berlin to Paris", "dog bites man" / "man bites dog", a
    word added, removed or changed)."""
    words = _WORD.findall(normalized.casefold())
    if len(words) <= FACT_KEY_MAX_WORDS:
        start = _least_rotation(words)
        words = words[start:] + words[:start]
    return " ".join(words)


def fact_hash(normalized: str) -> str:
    """sha256 hex of `fact_key`: equal fact hashes mean one fact (MNEMOFLOW_DEDUP_FACTS)."""
    return hashlib.sha256(fact_key(normalized).encode("utf-8")).hexdigest()


def _least_rotation(items: list[str]) -> int:
    """Where the lexicographically least rotation of `items` starts (Booth's algorithm, linear time)."""
    doubled = items + items
    failure = [-1] * len(doubled)
    start = 0
    for j in range(1, len(doubled)):
        item = doubled[j]
        i = failure[j - start - 1]
        while i != -1 and item != doubled[start + i + 1]:
            if item < doubled[start + i + 1]:
                start = j - i - 1
            i = failure[i]
        if item != doubled[start + i + 1]:  # i == -1
            if item < doubled[start]:
                start = j
            failure[j - start] = -1
        else:
            failure[j - start] = i + 1
    return start


def opaque_label(value: str, salt: str = "") -> str:
    """A short stable stand-in for `value` (a tenant on /metrics): 12 hex of HMAC-SHA256 keyed by `salt`."""
    return hmac.new(salt.encode("utf-8"), value.encode("utf-8"), hashlib.sha256).hexdigest()[:12]


def estimate_tokens(text: str) -> int:
    """membox's estimate: one token per CJK character plus one per four other characters, rounded up."""
    # Not len(findall): a list of every CJK character of a long document costs ~80 bytes a character, this ~8.
    cjk = len(text) - len(_CJK.sub("", text))
    return cjk + math.ceil((len(text) - cjk) / 4)


def split_by_estimate(text: str, window_tokens: int, overlap_tokens: int) -> list[str]:
    """Overlapping windows of at most ~`window_tokens` estimated tokens (for providers without a tokenizer here).

    Boundaries fall between words (or CJK characters); consecutive windows share ~`overlap_tokens`.
    """
    return list(iter_windows(text, window_tokens, overlap_tokens))


def iter_windows(text: str, window_tokens: int, overlap_tokens: int) -> Iterator[str]:
    """split_by_estimate's windows one at a time, holding only the current window's words: a caller that stops
    early (a document over its chunk limit) never pays for the rest of a long text."""
    if estimate_tokens(text) <= window_tokens:
        yield text
        return
    found = (
        (m.start(), m.end(), 1 if _CJK.fullmatch(m.group()) else math.ceil((len(m.group()) + 1) / 4))
        for m in _PIECE.finditer(text)
    )
    window: deque[tuple[int, int, int]] = deque()  # the pieces from the current window's first on, read so far

    def more() -> bool:
        piece = next(found, None)
        if piece is not None:
            window.append(piece)
        return piece is not None

    if not more():
        return
    while True:
        end, used = 0, 0
        while (end < len(window) or more()) and (end == 0 or used + window[end][2] <= window_tokens):
            used += window[end][2]
            end += 1
        yield text[window[0][0] : window[end - 1][1]]
        if end == len(window) and not more():
            return
        next_start, shared = end, 0
        while next_start > 1 and shared + window[next_start - 1][2] <= overlap_tokens:
            next_start -= 1
            shared += window[next_start][2]
        for _ in range(next_start):
            window.popleft()


def tail_by_estimate(text: str, tokens: int) -> str:
    """The longest ending of `text` that starts at a word (or CJK character) and fits ~`tokens` estimated tokens."""
    if tokens <= 0:
        return ""
    if estimate_tokens(text) <= tokens:
        return text
    start, used = len(text), 0
    for match in reversed(list(_PIECE.finditer(text))):
        cost = 1 if _CJK.fullmatch(match.group()) else math.ceil((len(match.group()) + 1) / 4)
        if used + cost > tokens:
            break
        used += cost
        start = match.start()
    return text[start:]
