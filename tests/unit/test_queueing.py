"""Queue declarations and routing: every task lands on a declared queue, or the send fails loudly."""

from __future__ import annotations

import uuid

import pytest
from kombu import Queue

from shared.config import Settings
from shared.jobs import ALL_QUEUES, ReembedChunk, StoreChunk, SweepJobs, TaskName, embed_queue
from shared.queueing import broker_keys, celery_config, route_task, unacked_key


def test_queues_are_declared_explicitly_with_safe_delivery_settings():
    config = celery_config(Settings(redis_url="redis://localhost:6379/0"))
    assert [q.name for q in config["task_queues"]] == list(ALL_QUEUES)
    assert set(ALL_QUEUES) == {
        "ingest",
        "maintenance",
        "sweep",
        *(f"embed.{s}" for s in ("episodic", "semantic", "procedural", "emotional", "reflective")),
    }
    assert config["task_create_missing_queues"] is False
    assert config["task_acks_late"] and config["task_reject_on_worker_lost"]
    assert config["worker_prefetch_multiplier"] == 1
    assert config["accept_content"] == ["json"] and config["task_ignore_result"] is True
    assert config["broker_transport_options"]["visibility_timeout"] >= 3600


def test_sector_tasks_route_to_their_sector_queue_even_when_celery_expanded_it():
    as_name = route_task(TaskName.STORE_CHUNK, (), {}, {"queue": embed_queue("emotional")})
    as_queue = route_task(TaskName.STORE_CHUNK, (), {}, {"queue": Queue("embed.emotional")})
    assert as_name["queue"] == as_queue["queue"] == "embed.emotional"


def test_maintenance_tasks_have_a_default_queue():
    assert route_task(TaskName.REINFORCE_HITS, (), {}, {})["queue"] == "maintenance"


def test_the_sweeper_has_a_queue_of_its_own():
    # recovery must not wait behind merges and decay cycles on the maintenance queue
    assert route_task(TaskName.SWEEP_JOBS, (), {}, {})["queue"] == "sweep"


def test_task_time_limits_stay_below_the_visibility_timeout():
    settings = Settings(redis_url="redis://localhost:6379/0")
    assert max(settings.task_time_limit_seconds, settings.ingest_time_limit) < settings.broker_visibility_timeout
    with pytest.raises(ValueError, match="VISIBILITY_TIMEOUT"):
        Settings(redis_url="redis://localhost:6379/0", broker_visibility_timeout=600)


def test_undeclared_or_missing_destinations_are_refused():
    with pytest.raises(ValueError, match="undeclared queue"):
        route_task(TaskName.STORE_CHUNK, (), {}, {"queue": "embed.dreams"})
    with pytest.raises(ValueError, match="has no queue"):
        route_task(TaskName.STORE_CHUNK, (), {}, {})
    with pytest.raises(ValueError, match="unknown sector"):
        embed_queue("dreams")


def test_a_chunk_travels_under_a_name_naming_its_sector_queue():
    job = uuid.uuid4()
    assert StoreChunk(job_id=job, seq=0, sector="semantic", user_id="alice").display_name == (
        "mnemoflow.memory.store_chunk@embed.semantic"
    )
    assert ReembedChunk(job_id=job, seq=1, sector="emotional").display_name == "mnemoflow.reembed.chunk@embed.emotional"
    assert SweepJobs().display_name is None  # one queue per task: its own name says it


def test_flower_lists_no_queue_that_does_not_exist():
    # Flower shows task_default_queue beside the declared queues until it knows the workers' queues.
    config = celery_config(Settings(redis_url="redis://localhost:6379/0"))
    assert config["task_default_queue"] in ALL_QUEUES


def test_queue_depth_reads_every_priority_list_of_the_redis_transport():
    assert broker_keys("embed.semantic", {}) == [
        "embed.semantic",
        "embed.semantic\x06\x163",
        "embed.semantic\x06\x166",
        "embed.semantic\x06\x169",
    ]
    options = {"global_keyprefix": "mf:", "sep": ":", "priority_steps": [0, 5]}
    assert broker_keys("ingest", options) == ["mf:ingest", "mf:ingest:5"]
    assert unacked_key(options) == "mf:unacked" and unacked_key({}) == "unacked"
