"""Leases on work: the attempt counts at the claim, a live claim turns duplicates away, the sweeper finds only
work whose worker died or whose message was lost."""

from __future__ import annotations

import time
import uuid

import pytest
from sqlalchemy import text

from shared.jobs import ChunkSpec
from shared.storage import events as event_store
from shared.storage import jobs as job_store
from shared.storage import leases

pytestmark = pytest.mark.integration


def _job(db, tenant: str, chunks: int = 1, kind: str = "batch") -> uuid.UUID:
    with db.session(tenant) as s:
        job_id, _ = job_store.create_job(s, user_id=tenant, kind=kind, total=chunks, params={}, idempotency_key=None)
        job_store.add_chunks(s, job_id, [ChunkSpec(seq, "semantic", [{"content": "x"}]) for seq in range(chunks)])
    return job_id


def _chunk(db, job_id: uuid.UUID, seq: int = 0) -> dict:
    with db.session() as s:
        row = s.execute(
            text(
                "SELECT attempts, lease_owner, lease_until, enqueued_at FROM job_chunks WHERE job_id = :j AND seq = :s"
            ),
            {"j": job_id, "s": seq},
        ).one()
    return dict(row._mapping)


def _stalled(db, job_id: uuid.UUID, stall: int = 300) -> list[int]:
    with db.session() as s:
        refs = leases.stalled_chunks(s, older_than_seconds=stall)
        s.rollback()  # only looking: the real sweeper marks what it re-sends
    return [r.seq for r in refs if r.job_id == job_id]


def _age(db, job_id: uuid.UUID, *, lease: str | None = None, enqueued: str | None = None) -> None:
    with db.session() as s:
        if lease is not None:
            s.execute(
                text(f"UPDATE job_chunks SET lease_until = now() - interval '{lease}' WHERE job_id = :j"), {"j": job_id}
            )
        if enqueued is not None:
            s.execute(
                text(f"UPDATE job_chunks SET enqueued_at = now() - interval '{enqueued}' WHERE job_id = :j"),
                {"j": job_id},
            )


def test_the_claim_counts_the_attempt_and_a_duplicate_counts_nothing(db, tenant):
    job_id = _job(db, tenant)
    with db.session() as s:
        assert leases.claim_chunk(s, job_id, 0, owner="a", ttl=30).attempts == 1
    with db.session() as s:  # the same message again while the first worker holds the lease
        again = leases.claim_chunk(s, job_id, 0, owner="b", ttl=30)
    assert again.attempts is None and again.lease_left is not None and 25 < again.lease_left <= 30
    assert _chunk(db, job_id)["attempts"] == 1 and _chunk(db, job_id)["lease_owner"] == "a"
    with db.session() as s:
        job = job_store.get_job(s, job_id)
    assert job is not None and job["status"] == "running" and job["attempts"] == 1


def test_a_chunk_being_worked_on_turns_a_claim_away_without_waiting(db, tenant):
    job_id = _job(db, tenant)
    with db.session() as holder:
        assert job_store.lock_chunk(holder, job_id, 0) is not None  # the worker's transaction holds the row
        started = time.monotonic()
        with db.session() as s:
            assert leases.claim_chunk(s, job_id, 0, owner="dup", ttl=30) == leases.ChunkClaim()
        assert time.monotonic() - started < 5  # SKIP LOCKED: it did not wait for the holder's commit
        assert _stalled(db, job_id, stall=0) == []  # nor does the sweeper take it from a live worker
    assert _chunk(db, job_id)["attempts"] == 0


def test_an_expired_lease_is_claimed_again_with_the_next_attempt(db, tenant):
    job_id = _job(db, tenant)
    with db.session() as s:
        leases.claim_chunk(s, job_id, 0, owner="dead", ttl=30)
    _age(db, job_id, lease="1 second")
    with db.session() as s:
        assert leases.claim_chunk(s, job_id, 0, owner="next", ttl=30).attempts == 2
    with db.session() as s:  # the chunk is the new owner's: the dead worker's late transaction finds nothing
        assert job_store.lock_chunk(s, job_id, 0, owner="dead") is None
        assert job_store.lock_chunk(s, job_id, 0, owner="next") is not None


def test_the_sweeper_resends_dead_workers_chunks_at_once_and_lost_messages_after_the_stall(db, tenant):
    dead, live, waiting, lost = (_job(db, tenant) for _ in range(4))
    for job_id in (dead, live):
        with db.session() as s:
            leases.claim_chunk(s, job_id, 0, owner="w", ttl=30)
    _age(db, dead, lease="1 second")  # claimed, then its worker died: re-sent now, whatever the stall
    _age(db, waiting, enqueued="10 seconds")  # sent, not claimed yet: a backlog, or a lost message
    _age(db, lost, enqueued="10 minutes")
    assert _stalled(db, dead) == [0]
    assert _stalled(db, live, stall=0) == []
    assert _stalled(db, waiting) == [] and _stalled(db, waiting, stall=5) == [0]
    assert _stalled(db, lost) == [0]
    with db.session() as s:  # what the sweeper does with them: the clock restarts and the dead lease goes
        leases.mark_enqueued(s, leases.stalled_chunks(s, older_than_seconds=300))
    assert _stalled(db, dead) == [] and _chunk(db, dead)["lease_owner"] is None
    with db.session() as s:
        assert leases.claim_chunk(s, dead, 0, owner="w2", ttl=30).attempts == 2


def test_a_failed_attempt_gives_the_lease_back_and_waits_for_its_retry(db, tenant):
    job_id = _job(db, tenant)
    with db.session() as s:
        leases.claim_chunk(s, job_id, 0, owner="w", ttl=30)
    with db.session() as s:
        job_store.fail_chunk(s, job_id, 0, error="EmbeddingFailed: provider blip", final=False, retry_in=60)
    chunk = _chunk(db, job_id)
    assert chunk["lease_owner"] is None and chunk["lease_until"] is None
    assert _stalled(db, job_id, stall=5) == []  # its retry is due in a minute: not lost
    with db.session() as s:  # the retry claims it with the next attempt
        assert leases.claim_chunk(s, job_id, 0, owner="w", ttl=30).attempts == 2


def test_a_heartbeat_keeps_a_long_step_claimed_and_releases_it_at_the_end(db, tenant):
    job_id = _job(db, tenant, kind="ingest")
    with db.session() as s:
        assert leases.claim_job(s, job_id, owner="extractor", ttl=2) == 1
    with leases.Heartbeat(db, job_id, "extractor", ttl=2):
        time.sleep(3.5)  # longer than the lease: only the heartbeat keeps it
        with db.session() as s:
            assert leases.claim_job(s, job_id, owner="duplicate", ttl=2) is None
    with db.session() as s:
        row = s.execute(text("SELECT attempts, lease_owner FROM jobs WHERE id = :j"), {"j": job_id}).one()
        assert row.attempts == 1 and row.lease_owner is None
        assert leases.claim_job(s, job_id, owner="retry", ttl=2) == 2


def test_without_its_heartbeat_a_job_lease_runs_out(db, tenant):
    job_id = _job(db, tenant, kind="ingest")
    with db.session() as s:
        assert leases.claim_job(s, job_id, owner="dies", ttl=2) == 1
    time.sleep(2.5)
    with db.session() as s:
        assert leases.claim_job(s, job_id, owner="next", ttl=2) == 2


def test_applied_events_are_pruned_by_age(db, maintenance):
    old, new = f"old-{uuid.uuid4()}", f"new-{uuid.uuid4()}"
    with db.session() as s:  # a tenant's task marks them
        assert event_store.try_mark_events(s, [old, new]) == {old, new}
        assert event_store.try_mark_events(s, [new]) == set()  # a redelivery
    with maintenance.session() as s:  # the store-wide pruning forgets them
        s.execute(
            text("UPDATE applied_events SET applied_at = now() - interval '3 days' WHERE event_id = :e"), {"e": old}
        )
    with maintenance.session() as s:
        assert event_store.prune_applied_events(s, older_than_days=2) >= 1
        left = set(
            s.execute(
                text("SELECT event_id FROM applied_events WHERE event_id IN (:a, :b)"), {"a": old, "b": new}
            ).scalars()
        )
    assert left == {new}
