"""The data a tenant owns: GET /export, POST /import, POST /jobs/{id}/cancel, DELETE /documents/{id}, and the
operator's POST /maintenance/erase (docs/data.md)."""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Generator
from typing import IO, Annotated, Any

from fastapi import APIRouter, Query, Request, Response, status
from starlette.concurrency import run_in_threadpool

from services.gateway import metrics
from services.gateway.deps import PrincipalDep, StateDep
from services.gateway.job_views import job_public
from services.gateway.responses import ClosingStream
from services.gateway.state import GatewayState
from shared.api.common import UserId
from shared.api.data import EraseAccepted, EraseRequest, ImportAccepted, LineRekeyed, LineSkipped
from shared.api.jobs import JobPublic
from shared.backpressure import Quota
from shared.data import cancel, erasure, import_plan
from shared.data.export import export_lines
from shared.errors import PayloadTooLarge
from shared.jobs import EraseTenant, JobKind
from shared.model.statuses import FINISHED_JOB

router = APIRouter(tags=["data"])
JSON_LINES = "application/x-ndjson"
_IMPORT_BODY = {
    "requestBody": {
        "required": True,
        "description": "an export (GET /export): JSON Lines, its header first and its end line last",
        "content": {JSON_LINES: {"schema": {"type": "string", "format": "binary"}}},
    }
}


class JsonLines(ClosingStream):
    media_type = JSON_LINES


@router.get(
    "/export",
    response_class=JsonLines,
    responses={200: {"content": {JSON_LINES: {"schema": {"type": "string"}}}, "description": "the tenant's export"}},
)
def export(
    state: StateDep,
    principal: PrincipalDep,
    user_id: UserId | None = None,
    vectors: Annotated[bool, Query(description="carry each memory's vectors (base64 float32)")] = True,
) -> JsonLines:
    """The tenant's documents, memories and waypoints as JSON Lines (docs/data.md#the-export-format), streamed
    from one snapshot; the last line counts what the file holds (a file without it was cut short)."""
    tenant = principal.tenant(user_id)
    state.limiter.charge(tenant, Quota.QUERIES)
    lines = export_lines(state.db, tenant, vectors=vectors)
    first = next(lines)  # opens the snapshot now: a database that cannot serve is a 503 here, not a cut file
    return JsonLines(
        _chain(first, lines),
        headers={"Content-Disposition": f'attachment; filename="mnemoflow-{tenant}.jsonl"'},
    )


def _chain(first: bytes, rest: Generator[bytes]) -> Generator[bytes]:
    try:
        yield first
        yield from rest
    finally:
        rest.close()  # the snapshot's session, also when this is closed before its end


@router.post("/import", status_code=status.HTTP_202_ACCEPTED, response_model=ImportAccepted, openapi_extra=_IMPORT_BODY)
async def import_file(
    request: Request, state: StateDep, principal: PrincipalDep, response: Response, user_id: UserId | None = None
) -> ImportAccepted:
    """Import an export into the tenant (its own or another's file): refused whole if a line is wrong, else one
    job that stores it (follow `status_url`), and which lines it skips or stores under another id, and why.
    Importing the same file again stores nothing twice; one import runs per tenant at a time (else 409)."""
    tenant = principal.tenant(user_id)
    await run_in_threadpool(_one_import_at_a_time, state, tenant)  # before reading a byte of the file
    await run_in_threadpool(state.limiter.charge, tenant, Quota.INGEST)
    limit = state.settings.import_max_bytes
    with tempfile.TemporaryFile(prefix="mnemoflow-import-") as spool:  # on disk: never the whole file in memory
        size = 0
        async for block in request.stream():
            size += len(block)
            if size > limit:
                raise PayloadTooLarge(
                    f"the file is more than {limit:,} bytes (MNEMOFLOW_IMPORT_MAX_BYTES)", details={"max_bytes": limit}
                )
            spool.write(block)
        spool.seek(0)
        # the operator may see every id: its imports keep ids where free; a tenant's keep only the tenant's own
        planned = await run_in_threadpool(_plan, state, tenant, spool, principal.is_admin)
    metrics.JOBS_ENQUEUED.labels(kind=JobKind.IMPORT).inc()
    answers = planned.answers or import_plan.Answers()
    if planned.finished:
        response.status_code = status.HTTP_200_OK
    if planned.job_id is not None:
        response.headers["Location"] = f"/jobs/{planned.job_id}"
    return ImportAccepted(
        job_id=planned.job_id,
        status="succeeded" if planned.finished else "queued",  # API words: ImportAccepted's Literal
        user_id=tenant,
        source_user_id=planned.source_user_id,
        documents=planned.documents,
        memories=planned.memories,
        waypoints=planned.waypoints,
        chunks=planned.chunks,
        status_url=f"/jobs/{planned.job_id}" if planned.job_id else None,
        lines=planned.lines,
        stored=answers.stored,
        skipped=[LineSkipped(**s) for s in answers.skipped],
        rekeyed=[LineRekeyed(**r) for r in answers.rekeyed],
        skipped_lines=answers.skipped_lines,
        rekeyed_lines=answers.rekeyed_lines,
    )


def _one_import_at_a_time(state: GatewayState, tenant: str) -> None:
    """Before the file is read: 409 while another import of the tenant runs (`import_plan.one_at_a_time`)."""
    with state.db.reading(tenant) as reading:
        import_plan.one_at_a_time(reading, tenant, lock=False)


def _plan(state: GatewayState, tenant: str, spool: IO[bytes], keep_ids: bool) -> import_plan.Planned:
    with state.unit_of_work(tenant) as work:
        import_plan.one_at_a_time(work.session, tenant, lock=True)
        planned = import_plan.plan_import(
            work.session,
            tenant,
            spool,
            limits=state.settings.limits,
            chunk_size=state.settings.chunk_size,
            keep_ids=keep_ids,
        )
        work.enqueue(*planned.messages)  # after the commit; a lost message is re-sent by the sweeper
    return planned


@router.post("/jobs/{job_id}/cancel", response_model=JobPublic)
def cancel_job(job_id: uuid.UUID, state: StateDep, principal: PrincipalDep, user_id: UserId | None = None) -> JobPublic:
    """Cancel a queued or running job: what is left of it is skipped, what it stored stays (each chunk whole), and
    the answer's progress is final. 409 when it has ended already; an ingest job's document ends cancelled."""
    if principal.is_admin and not user_id:  # the operator may cancel any job (as GET /jobs/{id} shows any)
        principal.require_admin()
        tenant, db = None, state.maintenance
    else:
        tenant = principal.tenant(user_id)
        db = state.db.bound(tenant)
    cancel.cancel_job(db, job_id, tenant)
    with db.reading() as session:
        job = job_public(session, job_id, tenant)
    assert job is not None
    return job


@router.delete("/documents/{document_id}")
def delete_document(
    document_id: uuid.UUID, state: StateDep, principal: PrincipalDep, user_id: UserId | None = None
) -> dict[str, Any]:
    """Delete a document and every memory made from its chunks (its ingestion is cancelled first if it runs)."""
    tenant = principal.tenant(user_id)
    state.limiter.charge(tenant, Quota.WRITES)
    deleted = erasure.delete_document(state.db.bound(tenant), tenant, document_id)
    return {"ok": True, "id": str(document_id), "memories_deleted": deleted}


@router.post("/maintenance/erase", status_code=status.HTTP_202_ACCEPTED, response_model=EraseAccepted)
def erase_tenant(
    body: EraseRequest,
    state: StateDep,
    principal: PrincipalDep,
    response: Response,
    wait: Annotated[bool, Query(description="wait for the erasure to finish (up to `timeout` seconds)")] = False,
    timeout: Annotated[float, Query(gt=0, le=600)] = 60.0,
) -> EraseAccepted:
    """Operator: erase a tenant: its memories, vectors, waypoints, documents, jobs, conversations, statistics and
    its keys in Valkey, as a job on the maintenance queue (docs/data.md#erasure). 200 once it has ended."""
    principal.require_admin()
    with state.unit_of_work(store_wide=True) as work:
        job, created = erasure.start(work.session, body.user_id)
        if created:
            work.enqueue(EraseTenant(job_id=job["id"]))  # after the commit; if lost, the sweeper sends it
    if created:
        metrics.JOBS_ENQUEUED.labels(kind=JobKind.ERASE).inc()
    deadline = time.monotonic() + timeout
    while True:
        with state.maintenance.reading() as session:
            job = erasure.progress(session, job["id"]) or job
        if not wait or job["status"] in FINISHED_JOB or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    if job["status"] in FINISHED_JOB:
        response.status_code = status.HTTP_200_OK
    response.headers["Location"] = f"/jobs/{job['id']}"
    return EraseAccepted(
        job_id=job["id"],
        status=job["status"],
        existing=not created,
        result=job["result"],
        status_url=f"/jobs/{job['id']}",
    )
