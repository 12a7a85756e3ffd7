"""What a sequence's items are embedded after, and which providers can use it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from shared.embedding import SyntheticEmbedder
from shared.embedding.base import ContextualEmbeddingProvider, embed_texts
from shared.embedding.calls import embed_timed
from shared.memory.sequence import CONVERSATION_KEYS, MAX_KEY_CHARS, conversation_key, sequence_contexts


def test_each_item_follows_the_turns_before_it_one_per_line():
    turns = ["a: one", "b: two", "a: three", "b: four"]
    assert sequence_contexts(turns, turns=2, chars=1000) == ["", "a: one", "a: one\nb: two", "b: two\na: three"]
    assert sequence_contexts(turns, turns=1, chars=1000) == ["", "a: one", "b: two", "a: three"]


def test_a_context_keeps_its_last_characters_and_zero_turns_means_none():
    assert sequence_contexts(["x" * 10 + "tail", "next"], turns=2, chars=4) == ["", "tail"]
    assert sequence_contexts(["a", "b", "c"], turns=0, chars=1000) == ["", "", ""]
    assert sequence_contexts(["a", "b"], turns=2, chars=0) == ["", ""]
    assert sequence_contexts([], turns=2, chars=100) == []


class _PlainOnly:
    """A provider with no use for context (an HTTP API, a static model)."""

    name, model, dim = "plain", "plain-v1", 8

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return SyntheticEmbedder(dim=8).embed(texts)


def test_providers_without_context_embed_the_texts_alone():
    plain = _PlainOnly()
    assert not isinstance(plain, ContextualEmbeddingProvider)
    np.testing.assert_array_equal(embed_texts(plain, ["a reply"], ["a question"]), plain.embed(["a reply"]))


def test_context_reaches_providers_that_use_it_and_only_when_there_is_some():
    synthetic = SyntheticEmbedder(dim=8)
    assert isinstance(synthetic, ContextualEmbeddingProvider)
    with_context, call = embed_timed(synthetic, ["a reply"], ["a question"])
    np.testing.assert_array_equal(with_context, synthetic.embed_in_context(["a reply"], ["a question"]))
    assert call.item_count == 1 and call.error is None
    assert not np.allclose(with_context, synthetic.embed(["a reply"]))
    np.testing.assert_array_equal(embed_texts(synthetic, ["a reply"], [""]), synthetic.embed(["a reply"]))
    with pytest.raises(ValueError, match="2 contexts for 1 texts"):
        embed_texts(synthetic, ["a reply"], ["a", "b"])


@pytest.mark.parametrize("name", ["session_id", "thread_id", "conversation_id", "run_id"])
def test_each_conversation_key_names_a_conversation(name):
    assert conversation_key({name: "abc"}) == f"{name}=abc"
    assert conversation_key({name: 42, "topic": "x"}) == f"{name}=42"


def test_the_first_conversation_key_present_wins_in_the_documented_order():
    assert CONVERSATION_KEYS == ("session_id", "thread_id", "conversation_id", "run_id")
    every = {"run_id": "r", "conversation_id": "c", "thread_id": "t", "session_id": "s"}
    assert conversation_key(every) == "session_id=s"
    assert conversation_key({k: v for k, v in every.items() if k != "session_id"}) == "thread_id=t"
    assert conversation_key({"run_id": "r", "conversation_id": "c"}) == "conversation_id=c"
    assert conversation_key({"session_id": "  ", "thread_id": "t"}) == "thread_id=t"  # a blank one is absent


def test_scopes_and_blank_or_odd_values_name_no_conversation():
    scopes = {"namespace": "n", "graph_id": "g", "user_id": "u", "agent_id": "a", "app_id": "p"}
    assert conversation_key(scopes) is None
    assert conversation_key({}) is None
    for value in (None, "", "   ", True, False, 1.5, ["s"], {"id": "s"}):
        assert conversation_key({"session_id": value}) is None, value


def test_a_long_conversation_key_is_hashed_to_fit_and_stays_distinct():
    long_a, long_b = "a" * 1000, "a" * 999 + "b"
    key_a, key_b = conversation_key({"thread_id": long_a}), conversation_key({"thread_id": long_b})
    assert key_a is not None and key_b is not None and key_a != key_b
    assert key_a.startswith("thread_id#sha256:") and len(key_a) <= MAX_KEY_CHARS
    assert key_a == conversation_key({"thread_id": long_a})
