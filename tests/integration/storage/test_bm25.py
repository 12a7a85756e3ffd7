"""BM25 in SQL: the tenant's term statistics and the full-text candidates."""

from __future__ import annotations

import uuid

import pytest

from shared.retrieval.lexical import select_terms
from shared.storage import bm25
from shared.storage.rows import MemoryFilter
from tests.integration.helpers import add, contents, documents, term_df

pytestmark = pytest.mark.integration


def test_bm25_statistics_follow_add_update_and_delete(db, engine, tenant):
    a, _ = add(db, engine, tenant, "Zanzibar spice market opens early")
    b, _ = add(db, engine, tenant, "The spice rack needs cumin")
    assert term_df(db, tenant, "spice") == 2 and term_df(db, tenant, "zanzibar") == 1
    assert documents(db, tenant) == 2
    with db.session() as s:
        engine.update(s, tenant, a["id"], {"content": "Harbour market opens early"})
    assert term_df(db, tenant, "spice") == 1 and term_df(db, tenant, "zanzibar") == 0
    assert term_df(db, tenant, "harbour") == 1
    with db.session() as s:
        assert engine.delete(s, tenant, b["id"])
    assert term_df(db, tenant, "spice") == 0 and documents(db, tenant) == 1


def test_a_tag_change_keeps_the_bm25_statistics_exact(db, engine, tenant):
    memory, _ = add(db, engine, tenant, "Harbour market opens early", tags=["fish"])
    with db.session() as s:
        engine.update(s, tenant, memory["id"], {"tags": ["zebra"]})
    assert term_df(db, tenant, "zebra") == 1 and term_df(db, tenant, "fish") == 0
    with db.session() as s:
        engine.update(s, tenant, memory["id"], {"content": "Harbour market closes late", "tags": ["eel"]})
    assert term_df(db, tenant, "eel") == 1 and term_df(db, tenant, "zebra") == 0
    assert term_df(db, tenant, "close") == 1 and term_df(db, tenant, "open") == 0
    assert documents(db, tenant) == 1
    with db.session() as s:  # neither content nor tags: the statistics stand as they were
        engine.update(s, tenant, memory["id"], {"metadata": {"source": "notes"}, "status": "superseded"})
    assert term_df(db, tenant, "eel") == 1 and term_df(db, tenant, "close") == 1
    assert documents(db, tenant) == 1


def test_a_rare_word_outranks_a_common_one(db, engine, tenant, settings):
    for i in range(30):
        add(db, engine, tenant, f"Coffee order number {i} was delivered")
    rare, _ = add(db, engine, tenant, "Meeting with the Zanzibar delegation")
    with db.session() as s:
        hits = bm25.lexical_candidates(
            s, tenant, "coffee zanzibar", limit=5, where=MemoryFilter(), params=settings.lexical
        )
    assert hits[0][0] == rare["id"]
    assert hits[0][1] > hits[1][1] > 0


def test_a_term_said_more_often_scores_higher_when_lengths_are_equal(db, engine, tenant, settings):
    for word in ("north", "south", "east", "west", "crane", "dock", "pier", "quay"):
        add(db, engine, tenant, f"Harbour {word} passed")  # three lexemes each, like the two below: avg length 3
    twice, _ = add(db, engine, tenant, "volcano ash, pumice volcano")  # lexemes volcano (x2), ash, pumic
    once, _ = add(db, engine, tenant, "volcano ash under lava")  # volcano, ash, lava: the same length
    binary = settings.model_copy(update={"bm25_term_frequency": False})
    with db.session() as s:
        hits = dict(
            bm25.lexical_candidates(s, tenant, "volcano", limit=5, where=MemoryFilter(), params=settings.lexical)
        )
        flat = dict(bm25.lexical_candidates(s, tenant, "volcano", limit=5, where=MemoryFilter(), params=binary.lexical))
    assert hits[twice["id"]] > hits[once["id"]] > 0
    k1 = settings.bm25_k1  # tf 2 against tf 1 at the same length: (2 (k1+1)/(2+k1)) / ((k1+1)/(1+k1))
    assert hits[twice["id"]] / hits[once["id"]] == pytest.approx(2 * (1 + k1) / (2 + k1), rel=1e-6)
    assert flat[twice["id"]] == pytest.approx(flat[once["id"]])  # switched off: a match counts once


def test_select_budget_lets_the_rarest_terms_select_and_the_others_only_score(db, engine, tenant, settings):
    for i in range(6):
        add(db, engine, tenant, f"Canal barge number {i} moored")
    rare, _ = add(db, engine, tenant, "Canal barge with a heron on deck")
    budgeted = settings.model_copy(update={"lexical_select_budget": 3})
    with db.session() as s:
        everything = bm25.lexical_candidates(
            s, tenant, "barge heron", limit=20, where=MemoryFilter(), params=settings.lexical
        )
        bounded = bm25.lexical_candidates(
            s, tenant, "barge heron", limit=20, where=MemoryFilter(), params=budgeted.lexical
        )
    assert len(everything) == 7 and everything[0][0] == rare["id"]
    # "heron" (df 1) selects; "barge" (df 7) would pass the budget of 3, so it only scores what heron found
    assert [i for i, _ in bounded] == [rare["id"]] and bounded[0][1] == pytest.approx(everything[0][1])
    assert select_terms(["b", "a", "c"], {"a": 1, "b": 5, "c": 2}, budget=3) == ["a", "c"]
    assert select_terms(["b"], {"b": 50}, budget=3) == ["b"]  # the rarest always selects
    assert select_terms(["b", "a"], {"a": 1, "b": 5}, budget=0) == ["b", "a"]


def test_beyond_the_rescore_window_the_count_once_score_picks_what_term_frequency_ranks(db, engine, tenant, settings):
    plain = [add(db, engine, tenant, f"Lantern {word} on the porch")[0] for word in ("red", "tin", "old", "new")]
    longer = add(db, engine, tenant, "Lantern beside the blue front door")[0]
    repeated = add(
        db, engine, tenant, "Lantern lantern lantern lantern lantern by the garden gate near a big oak tree"
    )[0]

    def lantern(window: int) -> list[tuple[uuid.UUID, float]]:
        windowed = settings.model_copy(update={"lexical_rescore_window": window})
        with db.session() as s:
            return bm25.lexical_candidates(s, tenant, "lantern", limit=6, where=MemoryFilter(), params=windowed.lexical)

    exact = lantern(0)
    assert exact[0][0] == repeated["id"]  # five positions of the word outweigh its length
    assert exact[-1][0] == longer["id"]
    # 6 memories may match, more than a window of 5: the 5 best by the count-once score (the fewest distinct
    # words; not the one that says the word five times among eight words) are scored with term frequency
    windowed = lantern(5)
    assert {i for i, _ in windowed} == {m["id"] for m in plain} | {longer["id"]}
    assert dict(windowed) == pytest.approx({i: score for i, score in exact if i != repeated["id"]})
    assert lantern(6) == exact  # a window as large as the matches changes nothing


def _common_word_hits(db, engine, tenant, settings, query: str, window: int):
    """Full-text candidates where a word in a tenth of the memories is common, with this rescore window."""
    common = settings.model_copy(
        update={"lexical_common_ratio": 0.1, "lexical_common_min_df": 0, "lexical_rescore_window": window}
    )
    with db.session() as s:
        found = bm25.lexical_candidates(s, tenant, query, limit=20, where=MemoryFilter(), params=common.lexical)
    return {row.content for row in contents(db, [i for i, _ in found])}, found


def test_words_too_common_to_rank_by_give_no_full_text_candidates(db, engine, tenant, settings):
    for i in range(10):
        add(db, engine, tenant, f"Weekly report {i} filed")
    for i in range(4):
        add(db, engine, tenant, f"Monthly report {i} filed")

    def hits(window):
        return _common_word_hits(db, engine, tenant, settings, "monthly report", window)

    # both words are common; "report" is in every memory, so only "monthly" narrows: 14 x 4/14 = 4 expected
    contents, found = hits(4)
    assert contents == {f"Monthly report {i} filed" for i in range(4)} and all(score > 0 for _, score in found)
    assert hits(3)[1] == []  # more expected than the window scores: no full-text candidates at all
    assert len(hits(0)[1]) == 4  # no window: the select budget (20,000) is the limit


def test_words_that_go_together_read_at_most_a_window_of_their_matches(db, engine, tenant, settings):
    for i in range(12):
        add(db, engine, tenant, f"Invoice backlog {i} reviewed")
        add(db, engine, tenant, f"Garden fence {i} painted")

    def hits(window):
        return _common_word_hits(db, engine, tenant, settings, "invoice backlog", window)[0]

    invoices = {f"Invoice backlog {i} reviewed" for i in range(12)}
    # Both words are in half the memories: 24 x 1/2 x 1/2 = 6 expected together, within a window of 8; the
    # phrase is in 12. Only 8 of them are read and ranked.
    capped = hits(8)
    assert len(capped) == 8 and capped <= invoices
    assert hits(12) == invoices  # as many as the window: all read
    assert hits(0) == invoices  # no window: the select budget (20,000) is the limit


def test_common_terms_select_nothing_alone_but_still_score(db, engine, tenant, settings):
    strict = settings.model_copy(update={"lexical_common_ratio": 0.2, "lexical_common_min_df": 0})
    for i in range(10):
        add(db, engine, tenant, f"Weekly report {i} filed")
    odd, _ = add(db, engine, tenant, "Weekly report about the volcano filed")
    with db.session() as s:
        both = bm25.lexical_candidates(
            s, tenant, "weekly volcano", limit=20, where=MemoryFilter(), params=strict.lexical
        )
        only_common = bm25.lexical_candidates(
            s, tenant, "weekly report", limit=20, where=MemoryFilter(), params=strict.lexical
        )
    assert [i for i, _ in both] == [odd["id"]]  # "weekly" is common: only the rare term selects
    assert len(only_common) == 11  # all terms common: they must all match (AND), nothing is lost
