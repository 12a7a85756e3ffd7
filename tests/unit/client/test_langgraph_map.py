"""How the LangGraph store maps an item to a memory (mnemoflow_client._langgraph_map): tags that tell namespaces
apart, the searchable text, the item read back, and LangGraph's value filters and namespace conditions."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from langgraph.store.base import MatchCondition
from mnemoflow_client._langgraph_map import (
    STORE_TAG,
    content_for,
    item_tag,
    item_tags,
    literal_prefix,
    metadata_for,
    namespace_matches,
    namespace_tag,
    render_value,
    stored_item,
    value_matches,
)

WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_an_items_tags_name_the_store_each_prefix_of_its_namespace_and_the_item():
    tags = item_tags(("users", "alice"), "drink")
    assert tags == [
        STORE_TAG,
        namespace_tag(("users",)),
        namespace_tag(("users", "alice")),
        item_tag(("users", "alice"), "drink"),
    ]
    assert namespace_tag(()) == STORE_TAG
    assert all(len(tag) <= 128 for tag in tags)  # the gateway's longest tag
    # labels holding the separator a readable tag would use are still other namespaces
    assert namespace_tag(("a/b",)) != namespace_tag(("a", "b"))
    assert item_tag(("a",), "b") != item_tag(("a", "b"), "") and item_tag(("x",), "k") != item_tag(("y",), "k")


def test_the_searchable_text_is_the_whole_value_the_fields_asked_for_or_nothing():
    value = {
        "text": "green tea",
        "cups": 2,
        "meta": {"b": 1, "a": [1, "x"]},
        "notes": [{"body": "one"}, {"body": "two"}],
    }
    assert (
        render_value(value, None)
        == 'text: green tea\ncups: 2\nmeta: {"a": [1, "x"], "b": 1}\nnotes: [{"body": "one"}, {"body": "two"}]'
    )
    assert render_value(value, ["text", "notes[*].body", "missing"]) == "green tea\none\ntwo"
    assert render_value(value, []) == ""
    assert content_for(("users", "alice"), "drink", "green tea") == "[users/alice] drink\ngreen tea"
    assert content_for(("users",), "drink", "") == "[users] drink"
    assert item_tag(("users",), "drink") in content_for(("users",), "drink", "x", disambiguate=True)


def test_an_item_is_read_back_from_its_metadata_and_other_memories_are_not_items():
    metadata = metadata_for(("users", "alice"), "drink", {"text": "tea"}, WHEN, WHEN.replace(year=2027))
    stored = stored_item("id-1", metadata, WHEN)
    assert stored is not None
    item = stored.item()
    assert (item.namespace, item.key, item.value) == (("users", "alice"), "drink", {"text": "tea"})
    assert (item.created_at, item.updated_at) == (WHEN, WHEN.replace(year=2027))
    assert stored.search_item(0.5).score == 0.5
    assert stored_item("id-2", {}, WHEN) is None
    assert stored_item("id-3", {"langgraph": {"namespace": "users", "key": "k", "value": {}}}, WHEN) is None
    assert stored_item("id-4", {"langgraph": {"namespace": ["u"], "key": "k", "value": []}}, WHEN) is None
    odd_times = stored_item("id-5", {"langgraph": {"namespace": ["u"], "key": "k", "value": {}, "created_at": 7}}, WHEN)
    assert odd_times is not None and odd_times.created_at == WHEN


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        (None, True),
        ({"status": "active"}, True),
        ({"status": "done"}, False),
        ({"score": {"$gt": 4.99}}, True),
        ({"score": {"$gte": 5, "$lt": 6}}, True),
        ({"score": {"$lte": 4}}, False),
        ({"status": {"$ne": "done"}}, True),
        ({"status": {"$eq": "active"}}, True),
        ({"missing": {"$gt": 1}}, False),
        ({"missing": None}, True),
        ({"nested": {"a": 1}}, True),
        ({"nested": {"a": 2}}, False),
        ({"tags": ["x", "y"]}, True),
        ({"tags": ["y", "x"]}, False),
        ({"status": "active", "score": {"$gt": 9}}, False),
    ],
)
def test_a_filter_reads_the_value_as_langgraphs_own_stores_do(conditions, expected):
    value = {"status": "active", "score": 5, "nested": {"a": 1, "b": 2}, "tags": ["x", "y"]}
    assert value_matches(value, conditions) is expected


def test_an_unknown_operator_is_refused():
    with pytest.raises(ValueError, match=r"\$in"):
        value_matches({"a": 1}, {"a": {"$in": [1]}})


def test_namespace_conditions_match_prefixes_and_suffixes_with_wildcards():
    namespace = ("users", "alice", "prefs")
    assert namespace_matches(namespace, MatchCondition("prefix", ("users",)))
    assert namespace_matches(namespace, MatchCondition("prefix", ("users", "*", "prefs")))
    assert not namespace_matches(namespace, MatchCondition("prefix", ("teams",)))
    assert namespace_matches(namespace, MatchCondition("suffix", ("prefs",)))
    assert namespace_matches(namespace, MatchCondition("suffix", ("*", "prefs")))
    assert not namespace_matches(namespace, MatchCondition("suffix", ("alice",)))
    assert not namespace_matches(("users",), MatchCondition("prefix", ("users", "alice")))
    assert literal_prefix(("users", "*", "prefs")) == ("users",) and literal_prefix(("*",)) == ()
