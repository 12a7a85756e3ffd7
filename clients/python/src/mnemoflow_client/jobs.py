"""Following jobs: what names a job, whether one moved, and `JobGroup`, many jobs' progress followed together."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any, TypeAlias

from .schemas.ingest import IngestAccepted
from .schemas.jobs import JobPublic, ReembedAccepted
from .schemas.memories import BatchAccepted

JOB_ENDED = ("succeeded", "failed", "cancelled")
DECAY_ENDED = ("succeeded", "skipped", "failed")
# A job to follow: its id, or an answer that names it (a batch's, an ingest's, a re-embed's, the job itself).
JobRef: TypeAlias = str | uuid.UUID | JobPublic | BatchAccepted | IngestAccepted | ReembedAccepted


def job_id_of(job: JobRef) -> uuid.UUID:
    """The id of the job `job` names; ValueError for an answer without one (a document already stored)."""
    if isinstance(job, JobPublic):
        return job.id
    if isinstance(job, BatchAccepted | IngestAccepted | ReembedAccepted):
        if job.job_id is None:
            raise ValueError(f"this answer names no job (status {job.status!r}: nothing was left to do)")
        return job.job_id
    return uuid.UUID(str(job))


class JobGroup:
    """Many jobs followed together (`wait_all`, a bulk load's progress): their latest states, what their progress
    adds up to, and which to ask about next. Jobs are kept in the order added, which is the order they run in."""

    def __init__(self, jobs: Iterable[JobRef] = (), *, user_id: str | None = None) -> None:
        self.user_id = user_id
        self._order: list[uuid.UUID] = []
        self._expected: dict[uuid.UUID, int] = {}
        self._latest: dict[uuid.UUID, JobPublic] = {}
        for job in jobs:
            self.add(job)

    def add(self, job: JobRef, total: int | None = None) -> uuid.UUID:
        """Follow `job` too; `total` is its item count before it is first polled (a batch's `items`)."""
        job_id = job_id_of(job)
        if job_id not in self._expected:
            self._order.append(job_id)
            if total is None and isinstance(job, BatchAccepted):
                total = job.items
            self._expected[job_id] = total or 0
        if isinstance(job, JobPublic):
            self.update(job)
        return job_id

    def update(self, job: JobPublic) -> None:
        """Record a job's state as just polled."""
        self._latest[job.id] = job

    def unfinished(self) -> list[uuid.UUID]:
        """The jobs not known to have ended, oldest first."""
        return [i for i in self._order if i not in self._latest or self._latest[i].status not in JOB_ENDED]

    @property
    def jobs(self) -> list[JobPublic | None]:
        """Each job's latest state (None until first polled), in the order added."""
        return [self._latest.get(i) for i in self._order]

    @property
    def done(self) -> int:
        """Items done across the jobs, as last polled."""
        return sum(job.progress.get("done", 0) for job in self._latest.values())

    @property
    def total(self) -> int:
        """Items in all, as last polled (or as declared for jobs not polled yet)."""
        return sum(
            self._latest[i].progress.get("total", 0) if i in self._latest else self._expected[i] for i in self._order
        )

    @property
    def finished(self) -> bool:
        """Whether every job has ended."""
        return not self.unfinished()

    @property
    def failed(self) -> list[JobPublic]:
        """The jobs that ended without succeeding: `failed`, or `cancelled`."""
        return [job for job in self._latest.values() if job.status in ("failed", "cancelled")]

    def __len__(self) -> int:
        return len(self._order)


def moved(last: JobPublic | None, current: JobPublic) -> bool:
    """Whether a job's status or progress changed since `last` (None: first seen)."""
    return last is None or (last.status, last.progress) != (current.status, current.progress)


def decay_moved(last: Any, current: Any) -> bool:
    """Whether a decay run's status or count changed since `last` (None: first seen)."""
    if last is None:
        return True
    return (last.status, last.processed, last.planned) != (current.status, current.processed, current.planned)
