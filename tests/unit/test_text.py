"""Normalisation, content hashing, the CJK-aware token estimate and opaque labels."""

from __future__ import annotations

import hashlib
import hmac
import itertools

import pytest

from shared.text import (
    FACT_KEY_MAX_WORDS,
    content_hash,
    estimate_tokens,
    fact_hash,
    fact_key,
    normalize_content,
    opaque_label,
    split_by_estimate,
)


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


def test_an_opaque_label_is_a_short_keyed_hash_that_hides_the_name():
    label = opaque_label("alice@example.com", "per-deployment-salt")
    assert label == hmac.new(b"per-deployment-salt", b"alice@example.com", hashlib.sha256).hexdigest()[:12]
    assert label == opaque_label("alice@example.com", "per-deployment-salt")  # stable: one series per tenant
    assert label != opaque_label("alice@example.com", "another-salt") != opaque_label("alice@example.com")
    assert opaque_label("bob") != opaque_label("alice") and "alice" not in opaque_label("alice")


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


def test_short_texts_are_one_window():
    assert split_by_estimate("a short note", 512, 50) == ["a short note"]


def test_long_texts_split_into_bounded_overlapping_windows():
    text = " ".join(f"word{i}" for i in range(1000))
    windows = split_by_estimate(text, 512, 50)
    assert len(windows) > 2
    assert all(estimate_tokens(w) <= 512 + 2 for w in windows)  # words are never cut
    words = [w.split() for w in windows]
    assert words[0][0] == "word0" and words[-1][-1] == "word999"  # nothing dropped at either end
    for left, right in itertools.pairwise(words):
        shared = set(left) & set(right)
        assert 15 <= len(shared) <= 30  # ~50 tokens at ~2 tokens a word
        assert right[0] in left and right[len(shared)] not in left  # the overlap is a prefix of the next window


def test_cjk_windows_count_characters_as_tokens():
    text = "记忆引擎" * 300  # 1,200 characters, ~1,200 tokens
    windows = split_by_estimate(text, 512, 50)
    assert [len(w) for w in windows] == [512, 512, 276]
    assert windows[0][-50:] == windows[1][:50]


def test_windows_come_one_at_a_time_and_a_caller_that_stops_pays_for_no_more():
    import tracemalloc

    from shared.text import iter_windows

    text = " ".join(f"word{i}" for i in range(2000))
    assert list(iter_windows(text, 64, 8)) == split_by_estimate(text, 64, 8)
    huge = "word " * 2_000_000  # 10 million characters
    tracemalloc.start()
    try:
        windows = iter_windows(huge, 16, 4)
        first = [next(windows) for _ in range(10)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert first[0] == " ".join(["word"] * 8) and peak < 1024 * 1024  # all its windows would be ~100 MB


def test_the_estimate_of_a_long_cjk_text_holds_no_list_of_its_characters():
    import tracemalloc

    text = "记忆引擎" * 1_000_000  # 4 million characters (16 MB as a str)
    tracemalloc.start()
    try:
        assert estimate_tokens(text) == 4_000_000
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024 * 1024  # a list of every character is ~320 MB


GREEN_TEA = "Alice likes green tea in the morning."


@pytest.mark.parametrize(
    "same",
    [
        "alice likes green tea in the morning",  # case and punctuation
        "In the morning Alice likes green tea.",  # a phrase moved to the front
        "In the morning, Alice likes green tea!",
        "Alice  likes green tea\nin the morning.",
    ],
)
def test_one_fact_in_other_case_punctuation_or_order_of_parts_has_one_key(same):
    assert fact_key(normalize_content(same)) == fact_key(normalize_content(GREEN_TEA))
    assert fact_hash(normalize_content(same)) == fact_hash(normalize_content(GREEN_TEA))


@pytest.mark.parametrize(
    "other",
    [
        "Alice likes green tea in the evening.",  # a near miss: another fact (MiniLM: 0.96)
        "Alice enjoys green tea in the morning.",  # a paraphrase by another word: not caught here
        "Alice likes green tea in the morning with honey.",  # adds something
        "Alice likes tea in the morning.",  # drops something
        "Alice doesn't like green tea in the morning.",
        "Bob likes green tea in the morning.",
    ],
)
def test_a_changed_added_or_removed_word_is_another_key(other):
    assert fact_key(normalize_content(other)) != fact_key(normalize_content(GREEN_TEA))


def test_swapped_roles_are_not_a_moved_phrase():
    assert fact_key("I moved from Paris to Berlin") != fact_key("I moved from Berlin to Paris")
    assert fact_key("dog bites man") != fact_key("man bites dog")
    assert fact_key("I like tea. I hate coffee.") == fact_key("I hate coffee. I like tea.")


def test_the_key_is_the_least_rotation_of_the_words():
    words = ["b", "a", "c", "a", "b"]
    rotations = [words[i:] + words[:i] for i in range(len(words))]
    assert fact_key(" ".join(words)) == " ".join(min(rotations))
    for rotation in rotations:
        assert fact_key(" ".join(rotation)) == " ".join(min(rotations))


def test_a_long_text_is_one_fact_only_in_the_same_order():
    words = [f"w{i}" for i in range(FACT_KEY_MAX_WORDS + 1)]
    moved = words[1:] + words[:1]
    assert fact_key(" ".join(words)) != fact_key(" ".join(moved))
    assert fact_key(" ".join(words).upper()) == fact_key(" ".join(words))
