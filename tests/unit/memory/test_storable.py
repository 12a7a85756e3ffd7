"""Finding text the store cannot hold in decoded JSON (shared/memory/storable.py), and reading a query string as strict
UTF-8 (services/gateway/storable.py)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.gateway.storable import query_pairs
from shared.errors import InvalidInput
from shared.memory.storable import check_storable, find_unstorable

_FINE = st.recursive(
    st.none()
    | st.booleans()
    | st.floats(allow_nan=False)
    | st.text(st.characters(codec="utf-8", exclude_characters="\x00")),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=5), inner, max_size=4
        )
    ),
    max_leaves=12,
)


@given(_FINE)
def test_text_utf8_can_carry_is_fine_whatever_its_shape(value):
    assert find_unstorable(value) is None
    json.dumps(value, ensure_ascii=False).encode("utf-8")  # what "fine" means: it has a UTF-8 form


@given(st.lists(st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=5), min_size=1, max_size=5),
       st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff", "\x00"]), st.data())  # fmt: skip
def test_the_first_bad_character_is_found_with_its_path_and_position(texts, bad, data):
    index = data.draw(st.integers(0, len(texts) - 1))
    at = data.draw(st.integers(0, len(texts[index])))
    texts[index] = texts[index][:at] + bad + texts[index][at:]
    found = find_unstorable({"items": [{"content": t} for t in texts]})
    assert found is not None
    assert found.path == ("items", index, "content") and found.field == f"items.{index}.content"
    assert (found.code_point, found.character) == (ord(bad), at + 1)


def test_the_message_names_the_field_and_says_what_to_do():
    with pytest.raises(InvalidInput) as refused:
        check_storable({"metadata": {"note": "hello world\ud800"}})
    assert refused.value.message == (
        "field `metadata.note` holds a lone surrogate (U+D800) at character 12; send valid UTF-8 text"
    )
    assert refused.value.details == {"field": "metadata.note", "code_point": "U+D800", "character": 12}
    with pytest.raises(InvalidInput) as nul:
        check_storable({"tags": ["a\x00"]}, prefix="line 3: ", line=3)
    assert nul.value.message == (
        "line 3: field `tags.0` holds a NUL character (U+0000), which PostgreSQL text cannot store, at character 2; "
        "remove it"
    )
    assert nul.value.details["line"] == 3


def test_a_bad_key_is_named_escaped_so_the_answer_can_carry_it():
    found = find_unstorable({"metadata": {"a\udc00b": 1}})
    assert found is not None and found.in_key and found.field == "metadata.a\\udc00b"
    assert "has a key that holds" in found.message()
    found.message().encode("utf-8")


def test_a_query_string_is_read_as_strict_utf8():
    assert query_pairs(b"tags=a&tags=%C3%A9t%C3%A9&q=two+words&flag") == [
        ("tags", "a"),
        ("tags", "été"),
        ("q", "two words"),
        ("flag", ""),
    ]
    for raw, says in ((b"tags=%ED%A0%80", "query parameter `tags`"), (b"%FF=1", "a query parameter's name")):
        with pytest.raises(InvalidInput) as refused:
            query_pairs(raw)
        assert says in refused.value.message and "not valid UTF-8 at byte 1" in refused.value.message
