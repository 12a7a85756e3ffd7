"""Erasing a tenant (POST /maintenance/erase): a job of the store's, run by a maintenance worker a
step at a time, that leaves nothing of the tenant in any table or Valkey key (docs/data.md#erasure).

A job, not a request: a tenant of a million memories takes minutes to delete (each memory's vectors leave their
HNSW indexes), and each batch is a transaction of its own, so locks stay short and a worker lost halfway loses
one batch: the sweeper sends the step again and it deletes what is left. A step first cancels the tenant's open
jobs (nothing of theirs is stored after), then deletes table by table, then the tenant's keys in Valkey, then
counts what is left in every table with a user_id. Rows the tenant writes meanwhile are found by that count and
deleted in another round; stop its writers (revoke its key) first for an erasure that stays one.

The job's row is the store's (user `_system`); the tenant's id is in its parameters while it runs, and dropped when
it succeeds: what remains is how many rows went from which table.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from typing import Any

import redis
from sqlalchemy.orm import Session

from shared.backpressure import Quota, bucket_key
from shared.config import Settings
from shared.data import cancel
from shared.db import Database
from shared.embedding.cache import tenant_key_pattern as query_cache_pattern
from shared.embedding.reembed import SYSTEM_TENANT
from shared.errors import Conflict, NotFound
from shared.jobs import JobKind
from shared.model.statuses import JobPhase, JobStatus
from shared.retrieval import stats as retrieval_stats
from shared.retrieval.hot_rows import tenant_key_pattern as row_cache_pattern
from shared.storage import bm25, erasure, leases
from shared.storage import documents as document_store
from shared.storage import jobs as job_store

log = logging.getLogger("mnemoflow.data")
STEP_SECONDS = 60.0  # a step's time budget; the next step is sent when it runs out
MAX_ROUNDS = 5  # rounds that find the tenant written to again before the job gives up saying so
MAX_STEPS = 1000


def start(session: Session, user_id: str) -> tuple[dict[str, Any], bool]:
    """The open erasure of `user_id` (the same job when asked twice), or a new one; (job, created)."""
    for job in job_store.open_jobs(session, JobKind.ERASE):
        if job["params"].get("user_id") == user_id:
            return job, False
    job_id, _ = job_store.create_job(
        session, user_id=SYSTEM_TENANT, kind=JobKind.ERASE, total=0, params={"user_id": user_id}, idempotency_key=None
    )
    created = job_store.get_job(session, job_id)
    assert created is not None
    return created, True


def progress(session: Session, job_id: uuid.UUID) -> dict[str, Any] | None:
    """The erasure's job as it is now (a store-wide session: erasures belong to no tenant)."""
    return job_store.get_job(session, job_id)


def run_step(
    store: Database, app: Database, client: redis.Redis, settings: Settings, job_id: uuid.UUID, *, budget: float
) -> str:
    """One step of an erasure job: `done` (succeeded or failed), `more` (send the next step) or `skipped`
    (another worker holds it, or it has ended). `store`: the maintenance role's; `app`: the app role's."""
    owner = leases.owner_token()
    with store.session() as session:
        attempts = leases.claim_job(session, job_id, owner=owner, ttl=settings.job_lease_seconds)
        job = job_store.get_job(session, job_id) if attempts is not None else None
    if job is None or attempts is None:
        return "skipped"
    tenant = str(job["params"]["user_id"])
    if attempts > MAX_STEPS:  # every step claims once; this many without finishing: it is lost each time
        return _fail(store, job_id, f"gave up after {attempts - 1} steps")
    with leases.Heartbeat(store, job_id, owner, settings.job_lease_seconds):
        eraser = _Eraser(store, app.bound(tenant), client, settings, job, time.monotonic() + budget)
        return eraser.run()


class _Eraser:
    def __init__(
        self,
        store: Database,
        db: Database,
        client: redis.Redis,
        settings: Settings,
        job: dict[str, Any],
        deadline: float,
    ) -> None:
        self.store, self.db, self.client, self.deadline = store, db, client, deadline
        self.job, self.job_id, self.tenant = job, job["id"], str(job["params"]["user_id"])
        self.batch = settings.erase_batch_size
        self.deleted: dict[str, int] = dict(job["result"].get("deleted") or {})
        self.rounds = int(job["result"].get("rounds") or 0)

    def out_of_time(self) -> bool:
        return time.monotonic() > self.deadline

    def count(self, table: str, n: int) -> None:
        if n:
            self.deleted[table] = self.deleted.get(table, 0) + n
            with self.store.session() as session:
                job_store.merge_result(session, self.job_id, {"deleted": self.deleted, "phase": JobPhase.DELETING})
                if table != "embed_logs":  # the progress counts the tenant's rows
                    erasure.add_done(session, self.job_id, n)

    def run(self) -> str:
        with self.store.session() as session:
            tables = erasure.tenant_tables(session)
            if "total" not in self.job["result"]:  # the first step: how much there is, for the progress
                found = erasure.counts(session, self.tenant, tables)
                total = sum(n for table, n in found.items() if table not in erasure.CASCADED)
                erasure.set_total(session, self.job_id, total)
                job_store.merge_result(session, self.job_id, {"total": total, "phase": JobPhase.DELETING})
        self.cancel_jobs()
        for table in tables:
            if not self.erase(table, tables):
                return "more"
        keys = forget_keys(self.client, self.tenant)
        with self.store.session() as session:
            left = erasure.counts(session, self.tenant, tables)
            self.rounds += 1
            if left and self.rounds >= MAX_ROUNDS:
                return _fail(
                    self.store, self.job_id, f"the tenant keeps being written to: {left} after {self.rounds} rounds"
                )
            job_store.merge_result(session, self.job_id, {"rounds": self.rounds, "left": left})
        if left:
            log.info("erasure %s: written to meanwhile (%s); another round", self.job_id, left)
            return "more"
        self.deleted["valkey_keys"] = self.deleted.get("valkey_keys", 0) + keys
        with self.store.session() as session:
            job_store.finish_job(
                session,
                self.job_id,
                status=JobStatus.SUCCEEDED,
                result={"phase": JobPhase.DONE, "deleted": self.deleted, "left": {}},
            )
            erasure.forget_tenant_of_job(session, self.job_id)
        log.info("erasure %s done: %s", self.job_id, self.deleted)
        return "done"

    def cancel_jobs(self) -> None:
        with self.db.session() as session:
            open_jobs = erasure.open_jobs(session, self.tenant)
        for job_id in open_jobs:
            with contextlib.suppress(Conflict, NotFound):  # ended meanwhile
                cancel.cancel_job(self.db, job_id, self.tenant)

    def erase(self, table: str, tables: list[str]) -> bool:
        """Delete the table's rows of the tenant, a batch per transaction; False when the step ran out of time."""
        while True:
            if table == "jobs":  # the embedder's rows of each job first: they name the job, not the tenant
                with self.db.session() as session:
                    ids = erasure.job_ids(session, self.tenant, limit=self.batch)
                with self.store.session() as session:
                    self.count("embed_logs", erasure.delete_embed_logs(session, ids))
                with self.db.session() as session:
                    n = erasure.delete_jobs(session, ids)
            else:
                with self.db.session() as session:
                    n = erasure.delete_batch(session, table, self.tenant, limit=self.batch, tables=tables)
            self.count(table, n)
            if n < self.batch:
                return True
            if self.out_of_time():
                return False


def _fail(store: Database, job_id: uuid.UUID, reason: str) -> str:
    with store.session() as session:
        job_store.finish_job(session, job_id, status=JobStatus.FAILED, error=reason)
    log.error("erasure %s failed: %s", job_id, reason)
    return "done"


def forget_keys(client: redis.Redis, tenant: str) -> int:
    """Delete the tenant's keys in Valkey: its rate-limit buckets, query-embedding and hot-row cache entries and
    query statistics; how many. (Queued task messages are not keys of its own: each is consumed, finding nothing.)"""
    removed = int(client.delete(*[bucket_key(quota, tenant) for quota in Quota]) or 0)
    stats_prefix = f"{retrieval_stats.KEY_PREFIX}:{tenant}:"
    patterns = [
        (row_cache_pattern(tenant), lambda key: True),
        (query_cache_pattern(tenant), lambda key: True),
        # a day's counts: <prefix>:<tenant>:YYYYMMDD (another tenant's name may begin with this one's and a colon)
        (f"{stats_prefix}*", lambda key: key[len(stats_prefix) :].isdigit()),
    ]
    for pattern, mine in patterns:
        batch: list[str] = []
        for raw in client.scan_iter(match=pattern, count=1000):
            key = raw.decode() if isinstance(raw, bytes) else str(raw)
            if mine(key):
                batch.append(key)
            if len(batch) >= 500:
                removed += int(client.delete(*batch) or 0)
                batch = []
        if batch:
            removed += int(client.delete(*batch) or 0)
    return removed


def delete_document(db: Database, tenant: str, document_id: uuid.UUID) -> int:
    """Delete a document of `tenant` and the memories made from its chunks (its ingestion cancelled first if it
    runs, so nothing of it is stored after); how many memories went. NotFound when it is not the tenant's."""
    with db.session() as session:
        document = document_store.get_document(session, document_id, tenant)
    if document is None:
        raise NotFound(f"document {document_id} not found for user_id {tenant!r}")
    if document["job_id"] is not None:
        with contextlib.suppress(Conflict):  # its ingestion has ended
            cancel.cancel_job(db, document["job_id"], tenant)
    with db.session() as session:
        ids = erasure.document_memories(session, tenant, document_id)
        bm25.count_terms(session, ids, sign=-1)
        deleted = erasure.delete_memories(session, tenant, ids)
        erasure.delete_document(session, tenant, document_id)
    return deleted
