"""What use does: a query's reinforcement, once per event, and the links it walked."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from shared.lifecycle.reinforcement import QueryUse, reinforce_uses
from shared.storage import memories as memory_store
from shared.storage import waypoints as waypoint_store
from tests.integration.helpers import add

pytestmark = pytest.mark.integration


def test_reinforcement_applies_once_per_event(db, engine, tenant):
    memory, _ = add(db, engine, tenant, "Grandma's recipe needs two cups of flour", salience=0.35)
    for _ in range(2):  # a redelivered message
        with db.session() as s:
            reinforce_uses(engine, s, tenant, [QueryUse(f"query:{tenant}", [memory["id"]])])
    with db.session() as s:
        row = memory_store.get_memory(s, tenant, memory["id"])
    assert row is not None
    assert row["salience"] == pytest.approx(0.85)  # decay seed: 0.35 + 0.5, once
    assert row["coactivations"] == 1


def test_traversed_waypoints_strengthen_and_weak_ones_are_pruned(db, engine, tenant):
    a, _ = add(db, engine, tenant, "Server room badge is kept at reception")
    b, _ = add(db, engine, tenant, "Reception closes at six in the evening")
    c, _ = add(db, engine, tenant, "Printer toner is ordered monthly")
    with db.session() as s:
        s.execute(
            text(
                "INSERT INTO waypoints (src_id, dst_id, user_id, weight) VALUES (:a, :b, :u, 0.98), (:a, :c, :u, 0.01)"
            ),
            {"a": a["id"], "b": b["id"], "c": c["id"], "u": tenant},
        )
        reinforce_uses(engine, s, tenant, [QueryUse(f"q2:{tenant}", [b["id"]], [(a["id"], b["id"])])])
    with db.session() as s:
        weight = s.execute(
            text("SELECT weight FROM waypoints WHERE src_id = :a AND dst_id = :b"),
            {"a": a["id"], "b": b["id"]},
        ).scalar_one()
        assert weight == pytest.approx(1.0)  # +0.05, capped at 1.0
        removed = waypoint_store.prune_waypoints(s, below=0.05)
        assert removed >= 1
        left = s.execute(text("SELECT count(*) FROM waypoints WHERE src_id = :a"), {"a": a["id"]}).scalar_one()
    assert left == 1


def test_a_query_s_reinforcement_is_recall_lift_and_a_client_s_confirms_it(db, engine, tenant):
    from shared.lifecycle.formulas import confirmed, returned

    memory, _ = add(db, engine, tenant, "The spare key is under the blue flowerpot", salience=0.4)
    with db.session() as s:
        reinforce_uses(engine, s, tenant, [QueryUse(f"q:{tenant}", [memory["id"]])])
        row = memory_store.get_memory(s, tenant, memory["id"])
        assert row is not None
        assert (row["salience"], row["recall_lift"]) == pytest.approx(returned(0.4, 0.0, boost=0.5))
        (after,) = memory_store.reinforce(s, tenant, [memory["id"]], boost=0.2)
    assert (after["salience"], after["recall_lift"]) == pytest.approx(confirmed(0.9, 0.5, boost=0.2))
    assert after["coactivations"] == 1  # a client's reinforcement is no coactivation
    assert row["last_used_at"] is None and after["last_used_at"] is not None  # being returned is not being used


def test_a_batch_of_queries_reinforces_as_they_would_one_after_another_and_once(db, engine, tenant):
    from shared.lifecycle.formulas import returned

    a, _ = add(db, engine, tenant, "The canoe is kept behind the boathouse", salience=0.1)
    b, _ = add(db, engine, tenant, "The boathouse key hangs by the door", salience=0.3)
    c, _ = add(db, engine, tenant, "Paddles are in the loft", salience=0.2)
    with db.session() as s:
        s.execute(
            text("INSERT INTO waypoints (src_id, dst_id, user_id, weight) VALUES (:a, :b, :u, 0.5), (:c, :a, :u, 0.5)"),
            {"a": a["id"], "b": b["id"], "c": c["id"], "u": tenant},
        )
    uses = [
        QueryUse(f"q1:{tenant}", [a["id"], b["id"]], [(a["id"], b["id"])]),
        QueryUse(f"q2:{tenant}", [a["id"], a["id"]], [(b["id"], a["id"]), (a["id"], b["id"])]),  # each counts once
        QueryUse(f"q1:{tenant}", [a["id"], b["id"]], [(a["id"], b["id"])]),  # the same event twice in a batch
        QueryUse(f"q3:{tenant}", [c["id"]], [(a["id"], c["id"])], reinforce=False),  # only marked
    ]
    with db.session() as s:
        applied = reinforce_uses(engine, s, tenant, uses)
    assert applied == {f"q1:{tenant}", f"q2:{tenant}", f"q3:{tenant}"}
    expected = {a["id"]: (0.1, 0.0), b["id"]: (0.3, 0.0)}
    for memory_id in (a["id"], b["id"], a["id"]):  # q1 returned a and b, q2 returned a
        expected[memory_id] = returned(*expected[memory_id], boost=engine.reinforcement.query_boost)

    def state() -> dict:
        with db.session() as s:
            rows = {i: memory_store.get_memory(s, tenant, i) for i in (a["id"], b["id"], c["id"])}
            weights = dict(
                s.execute(
                    text("SELECT src_id, weight FROM waypoints WHERE user_id = :u AND dst_id IN (:a, :b)"),
                    {"u": tenant, "a": a["id"], "b": b["id"]},
                ).all()
            )
        return {"rows": rows, "weights": weights}

    now = state()
    for memory_id, coactivations in ((a["id"], 2), (b["id"], 1)):
        row = now["rows"][memory_id]
        assert (row["salience"], row["recall_lift"]) == pytest.approx(expected[memory_id])
        assert row["coactivations"] == coactivations
    assert now["rows"][c["id"]]["salience"] == pytest.approx(0.2) and now["rows"][c["id"]]["coactivations"] == 0
    step = engine.waypoints.reinforce_step
    assert now["weights"][a["id"]] == pytest.approx(0.5 + 2 * step)  # a -> b walked by q1 and q2
    assert now["weights"][c["id"]] == pytest.approx(0.5)  # c -> a: only q3 walked it, without reinforcement
    with db.session() as s:  # the batch delivered again
        assert reinforce_uses(engine, s, tenant, uses) == set()
    assert state() == now
