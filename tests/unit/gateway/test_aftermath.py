"""The gateway's after-query bookkeeping: gathered, then written in batches by one thread."""

from __future__ import annotations

import threading
import time

from prometheus_client import REGISTRY

from services.gateway.aftermath import Batch, QueryAftermath, QueryRecord


def _record(i: int, *, reinforce: bool = True) -> QueryRecord:
    return QueryRecord(
        active=f"token-{i}" if i % 3 else None,
        user_id="alice" if i % 2 else "bob",
        result="injected" if i % 4 else "blind",
        calls=[f"call-{i}"],
        reinforcement={"event_id": f"query:{i}"} if reinforce else None,
    )


def test_a_batch_keeps_every_token_outcome_event_and_call():
    batch = Batch.of([_record(i, reinforce=i != 2) for i in range(1, 6)])
    assert batch.tokens == ["token-1", "token-2", None, "token-4", "token-5"]
    assert batch.outcomes == {("alice", "injected"): 3, ("bob", "injected"): 1, ("bob", "blind"): 1}
    assert [e["event_id"] for e in batch.events] == ["query:1", "query:3", "query:4", "query:5"]
    assert batch.calls == [f"call-{i}" for i in range(1, 6)]


def test_records_are_written_together_after_the_interval_and_the_rest_on_close():
    written: list[Batch] = []
    aftermath = QueryAftermath(written.append, interval=1.0)
    for i in range(1, 4):
        aftermath.add(_record(i))
    deadline = time.monotonic() + 5
    while not written and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(written) == 1 and len(written[0].events) == 3  # the three queries, in one batch
    aftermath.add(_record(4))
    aftermath.close()  # well before the next interval: close writes it
    assert [len(b.events) for b in written] == [3, 1]


def test_a_full_buffer_is_written_at_once():
    written: list[Batch] = []
    aftermath = QueryAftermath(written.append, interval=60, max_records=5)
    for i in range(5):
        aftermath.add(_record(i))
    deadline = time.monotonic() + 5
    while not written and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [len(b.tokens) for b in written] == [5]
    aftermath.close()


def _counted(outcome: str) -> float:
    return REGISTRY.get_sample_value("mnemoflow_query_aftermath_records_total", {"outcome": outcome}) or 0.0


def test_a_failing_write_loses_that_batch_only():
    before = {outcome: _counted(outcome) for outcome in ("written", "failed")}
    written: list[Batch] = []
    failed = threading.Event()

    def write(batch: Batch) -> None:
        if not failed.is_set():
            failed.set()
            raise ConnectionError("broker down")
        written.append(batch)

    aftermath = QueryAftermath(write, interval=0.05)
    aftermath.add(_record(1))
    assert failed.wait(5)
    aftermath.add(_record(2))
    aftermath.close()
    assert [b.events for b in written] == [[{"event_id": "query:2"}]]
    assert (_counted("written") - before["written"], _counted("failed") - before["failed"]) == (1, 1)
