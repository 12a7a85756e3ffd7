"""Fair queues: a message's broker priority from its tenant's open work (shared/backpressure.py), and what each
chunk is counted as; the priority a message is sent at, never carried in its payload."""

from __future__ import annotations

import uuid

from shared.backpressure import (
    DOCUMENT_TASK_WINDOWS,
    HIGHEST,
    LOWEST,
    PRIORITY_STEPS,
    QUIET_WINDOWS,
    SATURATION_WINDOWS,
    chunk_cost,
    item_cost,
    priority_for,
)
from shared.config import Settings
from shared.jobs import IngestDocument, JobKind, StoreChunk, chunk_message, plan_chunks
from shared.queueing import celery_config

JOB = uuid.UUID(int=11)


def test_a_tenant_with_little_open_work_is_served_first_and_a_backlog_falls_a_step_per_doubling():
    assert priority_for(0) == priority_for(10) == priority_for(QUIET_WINDOWS) == HIGHEST == 0
    assert [priority_for(n) for n in (17, 33, 65, 129, 257, 513, 1025, 2049)] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert priority_for(SATURATION_WINDOWS - 1) == LOWEST - 1
    assert priority_for(SATURATION_WINDOWS) == priority_for(10**9) == LOWEST == 9


def test_more_open_work_never_raises_a_tenant_above_one_with_less():
    priorities = [priority_for(n) for n in range(0, SATURATION_WINDOWS + 50)]
    assert priorities == sorted(priorities)
    assert set(priorities) == set(PRIORITY_STEPS)


def test_a_chunk_costs_its_items_model_windows_by_estimate_and_an_id_costs_one():
    assert item_cost({"content": "hello there"}) == 1
    assert item_cost({"content": "x" * 4 * 256 * 3}) == 3  # 768 estimated tokens: three 256-token windows
    assert item_cost({"id": str(JOB)}) == 1  # a re-embed's item
    assert chunk_cost([{"content": "a"}] * 10) == 10


def test_every_redis_priority_has_its_own_list():
    # kombu's default steps are [0, 3, 6, 9]: priorities 1 and 2 would share 0's list and overtake nothing
    options = celery_config(Settings(redis_url="redis://localhost:6379/0"))["broker_transport_options"]
    assert options["priority_steps"] == list(range(10))
    assert options["visibility_timeout"] >= 3600


def test_the_priority_is_how_a_message_is_sent_not_what_it_carries():
    message = StoreChunk(job_id=JOB, seq=1, sector="semantic", user_id="u", priority=4)
    assert "priority" not in message.kwargs()
    assert StoreChunk.received(message.kwargs()).priority is None
    assert IngestDocument(job_id=JOB, user_id="u", priority=9).kwargs() == {"job_id": str(JOB), "user_id": "u"}
    assert chunk_message(JobKind.BATCH, JOB, 1, "semantic", "u", 3).priority == 3  # the sweeper's re-send keeps it


def test_a_documents_chunks_are_cut_so_that_one_task_is_a_bounded_stretch_of_model_work():
    section = {"content": "word " * 1600}  # 2,000 estimated tokens: 8 windows
    items = [("semantic", section)] * 10
    bounded = plan_chunks(items, size=500, max_cost=DOCUMENT_TASK_WINDOWS, cost=item_cost)
    assert [len(c.items) for c in bounded] == [1] * 10
    assert all(chunk_cost(c.items) <= DOCUMENT_TASK_WINDOWS for c in bounded)
    assert [len(c.items) for c in plan_chunks(items, size=500)] == [10]  # a batch's chunks: by items only
    huge = [("semantic", {"content": "word " * 50_000})]  # one item over the bound is a chunk of its own
    assert [len(c.items) for c in plan_chunks(huge, size=500, max_cost=DOCUMENT_TASK_WINDOWS, cost=item_cost)] == [1]
