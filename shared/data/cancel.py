"""Cancelling a job (POST /jobs/{id}/cancel): what is left of it is skipped, what was stored stays whole.

When the cancel returns, the job's progress is final: a chunk that got to its job's row first committed before it
(its memories are counted), any other finds the job cancelled and stores nothing (shared.storage.cancels). An
ingest job's document ends `cancelled`, and nothing is planned for it after.
"""

from __future__ import annotations

import uuid
from typing import Any

from shared.db import Database
from shared.errors import Conflict, NotFound
from shared.jobs import JobKind
from shared.storage import cancels
from shared.storage import jobs as job_store

# The store's own jobs, which stop halfway only at a cost: a re-embed would leave sectors of two models, an
# erasure a tenant half erased.
NOT_CANCELLABLE = {
    JobKind.REEMBED: "a re-embed cannot be cancelled: stopped halfway it would leave vectors of two models; let it "
    "finish, then re-embed back if needed",
    JobKind.ERASE: "an erasure cannot be cancelled: it would leave the tenant half erased",
}


def cancel_job(db: Database, job_id: uuid.UUID, tenant: str | None) -> dict[str, Any]:
    """Cancel a queued or running job of `tenant` (None: any job, for the operator; `db` acts accordingly); the
    job as it ends. NotFound when it is not the tenant's, Conflict when it has ended or cannot be cancelled."""
    with db.session() as session:
        job = job_store.get_job(session, job_id, tenant)
        if job is None:
            raise NotFound(f"job {job_id} not found" + (f" for user_id {tenant!r}" if tenant else ""))
        if job["kind"] in NOT_CANCELLABLE:
            raise Conflict(NOT_CANCELLABLE[job["kind"]], details={"job_id": str(job_id), "kind": job["kind"]})
        cancelled = cancels.cancel_job(session, job_id)
        if cancelled is not None:
            job_store.merge_result(session, job_id, {"cancelled_chunks": cancelled["cancelled_chunks"]})
        ended = (job_store.get_job(session, job_id, tenant) or job)["status"]
    if job["kind"] == JobKind.INGEST:  # its own transaction (see shared.storage.cancels); again if ended already
        with db.session() as session:
            cancels.cancel_document(session, job_id)
    if cancelled is None:
        raise Conflict(
            f"job {job_id} has already ended ({ended}): only a queued or running job can be cancelled",
            details={"job_id": str(job_id), "status": ended},
        )
    return cancelled
