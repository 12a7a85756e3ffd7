"""Token packing: greedy by rank within the budget, CJK-aware costs, the usage footnote."""

from __future__ import annotations

from shared.retrieval.packing import pack
from shared.text import estimate_tokens


def test_admits_by_rank_while_the_budget_allows_and_skips_what_does_not_fit():
    texts = ["a" * 40, "b" * 400, "c" * 40, "d" * 40]  # 10, 100, 10, 10 tokens
    packed = pack(texts, budget=25, limit=10)
    assert packed.chosen == [0, 2]  # the long second one is skipped, the shorter third still fits
    assert packed.tokens == 20 and packed.considered == 4
    assert packed.footnote == "returned 2/4 memories, ~20/25 tokens"


def test_never_more_than_the_limit_and_nothing_when_nothing_fits():
    texts = ["x" * 8] * 10
    assert pack(texts, budget=1000, limit=3).chosen == [0, 1, 2]
    empty = pack(["y" * 400], budget=50, limit=5)
    assert empty.chosen == [] and empty.footnote == "returned 0/1 memories, ~0/50 tokens"


def test_cjk_text_costs_a_token_a_character():
    chinese = "记忆引擎会遗忘" * 10  # 70 characters, 70 tokens
    assert estimate_tokens(chinese) == 70
    assert pack([chinese, "short"], budget=60, limit=5).chosen == [1]
    assert pack([chinese, "short"], budget=80, limit=5).chosen == [0, 1]
