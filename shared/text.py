"""Text helpers: normalisation for exact-match dedup, content hashing, the CJK-aware token estimate."""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata

_WHITESPACE = re.compile(r"\s+")
# Characters a tokenizer spends about one token on each (membox's estimate counts them singly).
_CJK = re.compile(
    "["
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
    "]"
)


def normalize_content(text: str) -> str:
    """NFKC, whitespace runs folded to one space, trimmed; case is kept so dedup stays exact."""
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip()


def content_hash(text: str) -> str:
    """sha256 hex of the normalised content: equal hashes mean the same memory."""
    return hashlib.sha256(normalize_content(text).encode("utf-8")).hexdigest()


def estimate_tokens(text: str) -> int:
    """membox's estimate: one token per CJK character plus one per four other characters, rounded up."""
    cjk = len(_CJK.findall(text))
    return cjk + math.ceil((len(text) - cjk) / 4)
