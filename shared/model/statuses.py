"""The statuses a job, its chunks, a document and a decay run go through: the words stored in their rows' `status`
(each table's CHECK constraint lists the same) and shown by the API."""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    """A row of `jobs`: queued, then running, then one of the three final statuses."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


OPEN_JOB = (JobStatus.QUEUED, JobStatus.RUNNING)
FINISHED_JOB = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


class JobPhase(StrEnum):
    """Where a job is within its status, kept in its result's `phase` (a document's job: queued, extracting,
    embedding, then done, duplicate or failed; retrying between attempts; an erasure: deleting, then done)."""

    QUEUED = "queued"
    EXTRACTING = "extracting"
    EMBEDDING = "embedding"
    RETRYING = "retrying"
    DELETING = "deleting"
    DONE = "done"
    DUPLICATE = "duplicate"
    FAILED = "failed"
    CANCELLED = "cancelled"


class ChunkStatus(StrEnum):
    """A row of `job_chunks`: pending until stored (done), failed for good, or cancelled with its job."""

    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class DocumentStatus(StrEnum):
    """A row of `documents`: queued, extracting (parsed and chunked), embedding (its chunks stored), then final."""

    QUEUED = "queued"
    EXTRACTING = "extracting"
    EMBEDDING = "embedding"
    DONE = "done"
    FAILED = "failed"
    DUPLICATE = "duplicate"  # the same bytes or address as an earlier document of the tenant
    CANCELLED = "cancelled"


DOCUMENT_ENDED = (DocumentStatus.DONE, DocumentStatus.FAILED, DocumentStatus.DUPLICATE, DocumentStatus.CANCELLED)


class RunStatus(StrEnum):
    """A row of `decay_runs`: a decay cycle queued, running, then final (skipped: another cycle held the lock)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    SKIPPED = "skipped"
    FAILED = "failed"


RUN_ENDED = (RunStatus.SUCCEEDED, RunStatus.SKIPPED, RunStatus.FAILED)


class ChunkResult(StrEnum):
    """What a chunk task reports it did (its result's `status`, in Flower): stored the chunk, failed it for good,
    found nothing to do (already done or failed, or being worked on), or left it to the worker that holds it."""

    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"
    HELD = "held"
