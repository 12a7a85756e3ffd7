"""Text helpers: normalisation for exact-match dedup, content hashing, the CJK-aware token estimate."""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata

_WHITESPACE = re.compile(r"\s+")
_CJK = re.compile(
    "[\u1100-\u11ff\u3000-\u303f\u3040-\u309f\u30a0-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]"
)


def normalize_content(text: str) -> str:
    """NFKC, whitespace runs folded to one space, trimmed. Case is kept: dedup is exact, never lossy."""
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip()


def content_hash(text: str) -> str:
    """sha256 of the normalised content: equal hashes mean the same memory."""
    return hashlib.sha256(normalize_content(text).encode("utf-8")).hexdigest()


def estimate_tokens(text: str) -> int:
    """membox: CJK characters count one token each, everything else four characters a token."""
    if not text:
        return 0
    cjk = len(_CJK.findall(text))
    return cjk + math.ceil((len(text) - cjk) / 4)
