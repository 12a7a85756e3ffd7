"""Normalisation, content hashing and the CJK-aware token estimate."""

from __future__ import annotations

import hashlib

import pytest

from shared.text import content_hash, estimate_tokens, normalize_content


def test_normalize_folds_whitespace_and_trims():
    assert normalize_content("  a \t b\n\n c  ") == "a b c"
    assert normalize_content("a\u00a0\u2003b") == "a b"
    assert normalize_content(" \n\t ") == ""


def test_normalize_applies_nfkc_and_keeps_case():
    assert normalize_content("ｆｕｌｌ ﬁle") == "full file"
    assert normalize_content("Hello World") == "Hello World"


def test_content_hash_is_sha256_of_the_normalised_text():
    assert content_hash("a  b\n") == content_hash("a b")
    assert content_hash("a b") == hashlib.sha256(b"a b").hexdigest()
    assert content_hash("A b") != content_hash("a b")


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("abcd", 1),
        ("abcde", 2),
        ("hello world", 3),
        ("你好世界", 4),
        ("你好 world", 2 + 2),
        ("こんにちは", 5),
        ("カタカナ", 4),
        ("안녕하세요", 5),
        ("你好。", 3),
        ("ＡＢＣ", 3),
        ("㐀𠀀", 2),
        ("我爱Python", 2 + 2),
    ],
)
def test_estimate_tokens(text: str, tokens: int):
    assert estimate_tokens(text) == tokens
