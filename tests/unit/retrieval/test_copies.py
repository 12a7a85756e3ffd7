"""Near copies among the returned memories: the same words in any case, punctuation or order."""

from __future__ import annotations

from shared.retrieval.copies import copies_last, words_of


def test_words_ignore_case_punctuation_and_order():
    assert words_of("Thanks, Mel!") == words_of("mel thanks") == ("mel", "thanks")
    assert words_of("I live in Paris.") != words_of("I lived in Paris.")  # another word is another statement
    assert words_of("thanks thanks") != words_of("thanks")  # a word said twice counts twice


def test_a_copy_moves_below_the_others_and_names_the_first_with_its_words():
    ranked = [("a", "Thanks, Mel!"), ("b", "The ferry leaves at seven."), ("c", "mel thanks"), ("d", "Seven, ferry.")]
    order, copy_of = copies_last(ranked)
    assert order == ["a", "b", "d", "c"] and copy_of == {"c": "a"}


def test_two_copies_keep_their_order_and_a_text_without_words_is_no_copy():
    ranked = [("a", "Good luck!"), ("b", "good luck"), ("c", "LUCK good."), ("d", "🙂"), ("e", "🙂!"), ("f", "x")]
    order, copy_of = copies_last(ranked)
    assert order == ["a", "d", "e", "f", "b", "c"] and copy_of == {"b": "a", "c": "a"}
    assert copies_last([]) == ([], {})
