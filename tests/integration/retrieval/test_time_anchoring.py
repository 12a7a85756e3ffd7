"""Time anchoring and the occurred filters: when a memory happened, against the period a query names."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.api.query import QueryFilters
from shared.embedding import SyntheticEmbedder
from shared.memory.engine import MemoryEngine
from shared.retrieval.service import Retriever
from shared.storage import memories as memory_store
from shared.storage import waypoints as waypoint_store
from shared.storage.rows import MemoryFilter
from tests.integration.helpers import add, query, search

pytestmark = pytest.mark.integration


def test_a_query_naming_a_month_ranks_what_occurred_then_first(db, engine, tenant, settings, retriever):
    in_march, in_may = datetime(2023, 3, 14, tzinfo=UTC), datetime(2023, 5, 9, tzinfo=UTC)
    march, _ = add(db, engine, tenant, "Team shipped the mobile release", occurred_at=in_march)
    may, _ = add(db, engine, tenant, "Team shipped the mobile app release", occurred_at=in_may)
    undated, _ = add(db, engine, tenant, "Team shipped the mobile web release")  # occurred when it was stored
    assert may["occurred_at"] == in_may and undated["occurred_at"] is None

    def ask(q):
        outcome = query(db, retriever, tenant, q)
        return {c.id: c for c, _ in outcome.matches}, [c.id for c, _ in outcome.matches]

    by_id, order = ask("what did the team ship in May 2023")
    assert order[0] == may["id"] and by_id[may["id"]].components["period"] == pytest.approx(settings.period_weight)
    assert "period" not in by_id[march["id"]].components and "period" not in by_id[undated["id"]].components
    by_id, order = ask("what did the team ship in March")  # a month alone: that month of any year
    assert order[0] == march["id"] and "period" in by_id[march["id"]].components
    now = datetime.now(UTC)
    by_id, _ = ask(f"what did the team ship in {now.year}")  # no occurred_at: the time it was stored
    assert "period" in by_id[undated["id"]].components and "period" not in by_id[may["id"]].components
    by_id, _ = ask("what did the team ship")
    assert not any("period" in c.components for c in by_id.values())
    with db.session() as s:  # the time can be corrected later
        engine.update(s, tenant, march["id"], {"occurred_at": datetime(2023, 5, 30, tzinfo=UTC)})
    by_id, _ = ask("what did the team ship in May 2023")
    assert "period" in by_id[march["id"]].components


def test_occurred_filters_use_when_it_happened_and_apply_to_linked_memories(db, engine, tenant, retriever):
    march, _ = add(db, engine, tenant, "Ferry timetable changed for the spring", occurred_at=datetime(2023, 3, 14))
    may, _ = add(db, engine, tenant, "Ferry timetable changed for the summer", occurred_at=datetime(2023, 5, 9))
    undated, _ = add(db, engine, tenant, "Ferry timetable changed for the winter")  # happened when it was stored
    with db.session() as s:  # a reading-order link from May to March: the walk must not bring March back
        assert waypoint_store.create_link(s, tenant, may["id"], march["id"], kind="next", weight=1.0)

    def found(**filters):
        return {
            c.id for c, _ in query(db, retriever, tenant, "ferry timetable changed", min_score=0, **filters).matches
        }

    assert found() == {march["id"], may["id"], undated["id"]}
    may_only = {"occurred_after": datetime(2023, 5, 1), "occurred_before": datetime(2023, 5, 31, 23, 59)}
    assert found(**may_only) == {may["id"]}  # naive times are UTC
    assert found(occurred_before=datetime(2023, 4, 1, tzinfo=UTC)) == {march["id"]}
    assert found(occurred_after=datetime.now(UTC) - timedelta(hours=1)) == {undated["id"]}
    stored_today = datetime.now(UTC) - timedelta(hours=1)
    assert found(startTime=stored_today) == {march["id"], may["id"], undated["id"]}  # all were stored today
    with db.session() as s:
        rows, total = memory_store.list_memories(
            s, tenant, offset=0, limit=10, where=MemoryFilter(occurred_before=datetime(2023, 4, 1, tzinfo=UTC))
        )
    assert total == 1 and [r["id"] for r in rows] == [march["id"]]
    with pytest.raises(ValueError, match="occurred_after is later than occurred_before"):
        QueryFilters(occurred_after=datetime(2023, 6, 1), occurred_before=datetime(2023, 5, 1))


def test_a_query_saying_yesterday_ranks_what_occurred_yesterday_first(db, engine, tenant, settings, retriever):
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    earlier, _ = add(db, engine, tenant, "Noa booked the ferry tickets", occurred_at=midnight - timedelta(days=4))
    yesterday, _ = add(db, engine, tenant, "Noa booked the ferry seats", occurred_at=midnight - timedelta(hours=12))
    outcome = query(db, retriever, tenant, "what did Noa book yesterday", min_score=0)
    order = [c.id for c, _ in outcome.matches]
    by_id = {c.id: c for c, _ in outcome.matches}
    assert order[0] == yesterday["id"]
    assert by_id[yesterday["id"]].components["period"] == pytest.approx(settings.period_weight)
    assert "period" not in by_id[earlier["id"]].components
    outcome = query(db, retriever, tenant, "what did Noa book 4 days ago", min_score=0)
    assert outcome.matches[0][0].id == earlier["id"]


def test_the_period_a_query_names_is_searched_on_its_own(db, tenant, settings):
    """A memory of the named period that shares no word with the query and is no near vector still ranks:
    the period's memories are compared with the query themselves, not only re-ranked if already found."""
    weighty = settings.model_copy(update={"period_weight": 1.0})  # what happened then outranks everything
    engine = MemoryEngine(weighty, SyntheticEmbedder(dim=384))
    retriever = Retriever(weighty, engine.embedder)
    for n in range(12):  # the words and the vector search fill their candidates (k 2 -> 8 each) with these
        add(db, engine, tenant, f"Harbour ferry note {n}: the ferry crossing schedule and ferry fares")
    then, _ = add(db, engine, tenant, "Signed the lease for the workshop", occurred_at=datetime(2023, 5, 9))
    add(db, engine, tenant, "Painted the workshop door", occurred_at=datetime(2022, 5, 9))  # May, not of 2023

    def ask(retriever, q):
        with db.session() as s:
            return search(retriever, s, tenant, q, k=2, filters=QueryFilters(min_score=0))

    outcome = ask(retriever, "ferry crossing in May 2023")
    top = outcome.matches[0][0]
    assert top.id == then["id"] and top.period_rank == 1 and top.lexical_rank is None and top.dense_rank is None
    assert top.components["period"] == pytest.approx(1.0)
    assert len(outcome.matches) == 2 and outcome.matches[1][0].period_rank is None  # the only one of the period

    blind = Retriever(weighty.model_copy(update={"period_scan_limit": 0}), SyntheticEmbedder(dim=384))
    assert then["id"] not in {c.id for c, _ in ask(blind, "ferry crossing in May 2023").matches}  # re-ranking alone
    outcome = ask(retriever, "ferry crossing in May")  # every May: unbounded, not searched on its own
    assert then["id"] not in {c.id for c, _ in outcome.matches}
