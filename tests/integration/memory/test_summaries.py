"""User summaries on real PostgreSQL: built on first read, kept while the memories stay, rebuilt after an add or a
delete; the regeneration job, once per job, and re-sent by the sweeper when its message is lost."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from shared.jobs import JobKind, SweepJobs
from shared.memory import summaries
from shared.memory.digest import NO_MEMORIES, SummaryParams
from shared.queueing import make_celery, send
from shared.storage import jobs as job_store
from shared.storage import memories as memory_store
from shared.storage import user_summaries as summary_store
from tests.integration.helpers import add, job_state, wait_until

pytestmark = pytest.mark.integration
PARAMS = SummaryParams()


def read(db, tenant: str) -> dict:
    with db.session() as s:
        return summaries.current(s, tenant, PARAMS)


def test_a_summary_is_built_on_first_read_and_kept_until_memories_are_added_or_deleted(db, engine, tenant):
    assert read(db, tenant)["summary"] == NO_MEMORIES
    tea, _ = add(db, engine, tenant, "Mia prefers jasmine tea in the evening")
    add(db, engine, tenant, "Yesterday Mia met Tomas at the lighthouse")
    first = read(db, tenant)
    assert first["memory_count"] == 2 and "jasmine tea" in first["summary"] and "lighthouse" in first["summary"]
    assert first["digest"]["top_terms"][0] == "mia"
    with db.session() as s:  # used: salience changes, the memories do not
        memory_store.reinforce(s, tenant, [tea["id"]], boost=0.2)
    assert read(db, tenant)["updated_at"] == first["updated_at"]  # the stored one: no rebuild
    with db.session() as s:
        engine.delete(s, tenant, tea["id"])
    after = read(db, tenant)
    assert (
        after["memory_count"] == 1 and "jasmine" not in after["summary"] and after["updated_at"] > first["updated_at"]
    )


def test_a_regeneration_job_rebuilds_once_and_a_duplicate_message_changes_nothing(db, engine, settings, tenant):
    add(db, engine, tenant, "Looking back, I realised the lesson: rest matters before a race")
    with db.session() as s:
        job_id, _ = job_store.create_job(
            s, user_id=tenant, kind=JobKind.SUMMARY, total=1, params={}, idempotency_key=None
        )
    run = {"lease_seconds": settings.job_lease_seconds, "max_attempts": settings.job_max_attempts}
    assert summaries.regenerate(db, job_id, tenant, PARAMS, **run).status == "succeeded"
    job = job_state(db, job_id)
    assert job["status"] == "succeeded" and job["attempts"] == 1
    with db.session() as s:
        built = summary_store.get_summary(s, tenant)
    assert built["reflection_count"] == 1 and "rest matters" in built["summary"]
    assert summaries.regenerate(db, job_id, tenant, PARAMS, **run).status == "skipped"  # redelivered
    with db.session() as s:
        assert summary_store.get_summary(s, tenant)["updated_at"] == built["updated_at"]
    assert job_state(db, job_id)["attempts"] == 1


def test_the_sweeper_resends_a_regeneration_whose_message_was_lost(db, engine, settings, worker, tenant):
    add(db, engine, tenant, "Mia keeps her bike in the shed")
    with db.session() as s:  # the gateway committed the job; its message never reached the broker
        job_id, _ = job_store.create_job(
            s, user_id=tenant, kind=JobKind.SUMMARY, total=1, params={}, idempotency_key=None
        )
        s.execute(text("UPDATE jobs SET updated_at = now() - interval '1 hour' WHERE id = :id"), {"id": job_id})
    app = make_celery(settings, "tests.sweeper")
    try:
        send(app, SweepJobs())
        wait_until(lambda: job_state(db, job_id)["status"] == "succeeded")
    finally:
        app.close()
    with db.session() as s:
        assert "bike in the shed" in summary_store.get_summary(s, tenant)["summary"]
