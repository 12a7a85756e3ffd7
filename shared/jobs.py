"""The contract between the gateway and the workers: queues, task names, job kinds, and every message, typed.

The gateway enqueues by task *name* (it never imports the workers). Each message is a pydantic model here: the
sender builds it (`shared.queueing.send`), the task that receives it validates its kwargs back into it
(`Message.received`), so both sides read one definition of every payload. So are the items a batch or ingest
job stores in its chunks (`ChunkItem`). Import-light: pydantic, the standard library and the API schemas.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from shared.api.common import SECTORS, Real, TagsAndMetadata, assume_utc
from shared.api.memories import MemoryCreate, memory_text, occurred_from_metadata


class Queue(StrEnum):
    INGEST = "ingest"
    EMBED_EPISODIC = "embed.episodic"
    EMBED_SEMANTIC = "embed.semantic"
    EMBED_PROCEDURAL = "embed.procedural"
    EMBED_EMOTIONAL = "embed.emotional"
    EMBED_REFLECTIVE = "embed.reflective"
    MAINTENANCE = "maintenance"
    SWEEP = "sweep"  # recovery on its own queue: it never waits behind merges, decay or re-embeds


ALL_QUEUES: tuple[str, ...] = tuple(q.value for q in Queue)


def embed_queue(sector: str) -> str:
    """The queue that embeds and stores memories of one sector."""
    if sector not in SECTORS:
        raise ValueError(f"unknown sector {sector!r}; expected one of {', '.join(SECTORS)}")
    return f"embed.{sector}"


class TaskName(StrEnum):
    STORE_CHUNK = "mnemoflow.memory.store_chunk"
    REINFORCE_HITS = "mnemoflow.memory.reinforce_hits"
    REINFORCE_BATCH = "mnemoflow.memory.reinforce_batch"
    SWEEP_JOBS = "mnemoflow.jobs.sweep"
    PRUNE_WAYPOINTS = "mnemoflow.waypoints.prune"
    MERGE_FRESH = "mnemoflow.vectors.merge_fresh"
    REEMBED_PLAN = "mnemoflow.reembed.plan"
    REEMBED_CHUNK = "mnemoflow.reembed.chunk"
    REEMBED_FINISH = "mnemoflow.reembed.finish"
    PRUNE_EMBED_LOGS = "mnemoflow.embed_logs.prune"
    PRUNE_APPLIED_EVENTS = "mnemoflow.events.prune"
    DECAY_CYCLE = "mnemoflow.decay.cycle"
    INGEST_DOCUMENT = "mnemoflow.ingest.document"
    REGENERATE_SUMMARY = "mnemoflow.users.regenerate_summary"
    IMPORT_CHUNK = "mnemoflow.data.import_chunk"
    ERASE_TENANT = "mnemoflow.data.erase_tenant"


def shadow_name(task: str, queue: str) -> str:
    """The display name of a task sent to one of several queues: `<task>@<queue>`."""
    return f"{task}@{queue}"


# Where a task goes when the caller does not say (sector tasks always name their queue).
DEFAULT_QUEUE: dict[str, str] = {  # values are Queue members (str)
    TaskName.REINFORCE_HITS: Queue.MAINTENANCE,
    TaskName.REINFORCE_BATCH: Queue.MAINTENANCE,
    TaskName.SWEEP_JOBS: Queue.SWEEP,
    TaskName.PRUNE_WAYPOINTS: Queue.MAINTENANCE,
    TaskName.MERGE_FRESH: Queue.MAINTENANCE,
    TaskName.REEMBED_PLAN: Queue.MAINTENANCE,
    TaskName.REEMBED_FINISH: Queue.MAINTENANCE,
    TaskName.PRUNE_EMBED_LOGS: Queue.MAINTENANCE,
    TaskName.PRUNE_APPLIED_EVENTS: Queue.MAINTENANCE,
    TaskName.DECAY_CYCLE: Queue.MAINTENANCE,
    TaskName.INGEST_DOCUMENT: Queue.INGEST,
    TaskName.REGENERATE_SUMMARY: Queue.MAINTENANCE,
    TaskName.ERASE_TENANT: Queue.MAINTENANCE,
}


class JobKind(StrEnum):
    """What a row of `jobs` is for (its chunks are stored by the task of that kind)."""

    BATCH = "batch"  # POST /memory/batch: chunks of memories, stored on the sector queues
    INGEST = "ingest"  # a document: extracted on the ingest queue, then chunks like a batch's
    REEMBED = "reembed"  # the whole store converted to another embedding model
    SUMMARY = "summary"  # a tenant's user summary rebuilt (POST /users/{id}/summary/regenerate)
    IMPORT = "import"  # POST /import: an export's memories in chunks, then its waypoints (shared.data.imports)
    ERASE = "erase"  # a tenant erased, every row and key of it (the store's job: shared.data.erasure)


class Message(BaseModel):
    """A task's payload. `kwargs()` is what travels (JSON); `queue` is where it goes."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    task: ClassVar[TaskName]
    # The broker priority it is sent at (shared/backpressure.py; 0 first); it does not travel. None: the default, 0.
    priority: int | None = Field(default=None, ge=0, le=9, exclude=True)

    @property
    def queue(self) -> str:
        return DEFAULT_QUEUE[self.task]

    @property
    def display_name(self) -> str | None:
        """The name monitoring shows for this message (Celery's `shadow`); None: its task's name."""
        return None

    def kwargs(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def received(cls, kwargs: dict[str, Any]) -> Self:
        """The message a task was sent, from its kwargs."""
        return cls.model_validate(kwargs)


class _ChunkMessage(Message):
    """One chunk of a job, on the queue of its sector (the sector routes it; it does not travel)."""

    job_id: uuid.UUID
    seq: int
    sector: str | None = Field(default=None, exclude=True)

    @property
    def queue(self) -> str:
        if self.sector is None:
            raise ValueError(f"{type(self).__name__} needs its chunk's sector to be routed")
        return embed_queue(self.sector)

    @property
    def display_name(self) -> str:
        """`mnemoflow.memory.store_chunk@embed.semantic`: one task on five queues, told apart in Flower and logs."""
        return shadow_name(self.task, self.queue)


class StoreChunk(_ChunkMessage):
    """Embed and store one chunk of a batch or ingest job."""

    task = TaskName.STORE_CHUNK
    user_id: str  # whose job it is: the worker acts for this tenant, and the database shows it nothing else


class ReembedChunk(_ChunkMessage):
    """Re-embed one chunk of a re-embed job with the job's target model."""

    task = TaskName.REEMBED_CHUNK


class ImportChunk(_ChunkMessage):
    """Store one chunk of an import job: memories as exported, or (once they are all stored) waypoints."""

    task = TaskName.IMPORT_CHUNK
    user_id: str  # whose import it is (see StoreChunk)


def chunk_message(
    kind: str, job_id: uuid.UUID, seq: int, sector: str, user_id: str, priority: int | None = None
) -> StoreChunk | ReembedChunk | ImportChunk:
    """The message that processes a chunk of a job of `kind` (the sweeper re-sends chunks of every kind, at the
    priority they were first sent with); a re-embed is the store's, not `user_id`'s."""
    if kind == JobKind.REEMBED:
        return ReembedChunk(job_id=job_id, seq=seq, sector=sector, priority=priority)
    if kind == JobKind.IMPORT:
        return ImportChunk(job_id=job_id, seq=seq, sector=sector, user_id=user_id, priority=priority)
    return StoreChunk(job_id=job_id, seq=seq, sector=sector, user_id=user_id, priority=priority)


class IngestDocument(Message):
    """Advance an ingest job by one step: fetch or read, extract, chunk, plan (or finish it)."""

    task = TaskName.INGEST_DOCUMENT
    job_id: uuid.UUID
    user_id: str  # whose document it is (see StoreChunk)


class RegenerateSummary(Message):
    """Rebuild a tenant's user summary (shared.memory.summaries); a job of kind `summary`."""

    task = TaskName.REGENERATE_SUMMARY
    job_id: uuid.UUID
    user_id: str  # whose summary it is (see StoreChunk)


class EraseTenant(Message):
    """Erase a tenant: its open jobs cancelled, its rows deleted in batches, its keys in Valkey removed (a step
    at a time: a step that runs out of time sends the next)."""

    task = TaskName.ERASE_TENANT
    job_id: uuid.UUID


class PlanReembed(Message):
    """Split what is left to re-embed into chunks (or ask for the switch when nothing is left)."""

    task = TaskName.REEMBED_PLAN
    job_id: uuid.UUID


class FinishReembed(Message):
    """Switch the store to the job's target model once no vector of another model is left."""

    task = TaskName.REEMBED_FINISH
    job_id: uuid.UUID


class ReinforceHits(Message):
    """A query's after-effects, applied once per `event_id`: reinforcement of its hits and the links walked to
    them, and the regeneration of hits that decay compressed or fingerprinted."""

    task = TaskName.REINFORCE_HITS
    event_id: str
    user_id: str
    memory_ids: list[uuid.UUID]
    traversed: list[tuple[uuid.UUID, uuid.UUID]] = Field(default_factory=list)
    reinforce: bool = True
    regenerate: bool = False


class ReinforceBatch(Message):
    """The after-effects of several queries, as a gateway gathers them."""

    task = TaskName.REINFORCE_BATCH
    events: list[ReinforceHits]


class RunDecayCycle(Message):
    """One decay cycle: scheduled (waits for quiet and the cooldown) or an operator's (runs now)."""

    task = TaskName.DECAY_CYCLE
    run_id: uuid.UUID | None = None  # the decay_runs row the operator's request created (scheduled: the task id's)
    ratio: float | None = None  # None: the setting (OM_DECAY_RATIO)
    trigger: Literal["schedule", "operator"] = "schedule"


class MergeFresh(Message):
    """Move fresh vectors into the HNSW indexes and link their memories."""

    task = TaskName.MERGE_FRESH


class SweepJobs(Message):
    """Re-send the work whose message looks lost."""

    task = TaskName.SWEEP_JOBS


class PruneWaypoints(Message):
    task = TaskName.PRUNE_WAYPOINTS


class PruneEmbedLogs(Message):
    task = TaskName.PRUNE_EMBED_LOGS


class PruneAppliedEvents(Message):
    """Forget applied event ids older than any redelivery can be (MNEMOFLOW_APPLIED_EVENT_RETENTION_DAYS)."""

    task = TaskName.PRUNE_APPLIED_EVENTS


class Classified(BaseModel):
    """The sectors (primary first) and confidence the item was classified into when its job was planned."""

    sectors: list[str]
    confidence: float


class Placement(BaseModel):
    """The document a chunk item was cut from, and where in it."""

    document_id: uuid.UUID
    chunk_index: int


# The version of `ChunkItem`'s stored form. Raise it when a change would make a worker of the release before read
# an item wrong (a field renamed, a meaning changed); a field that may be absent needs no new version.
CHUNK_ITEM_VERSION = 1


class ChunkItem(TagsAndMetadata):
    """A memory as a batch or ingest job's chunk stores it: the fields of the item the write path reads, plus what
    the planner found out.

    Its own schema, not the API's `MemoryCreate`: work in flight is read by the workers as it was planned, whatever
    the API has gained or lost since (`CHUNK_ITEM_VERSION`, stored as `_v`; an item without one is of version 1).
    Stored in `job_chunks.items` under the aliases (the underscore keys), which the workers read back; validated
    there again (the text a memory can hold, the tags' and metadata's limits), so a chunk that cannot be a memory
    fails with its job."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    version: int = Field(default=CHUNK_ITEM_VERSION, alias="_v")
    content: str = Field(min_length=1)
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    salience: Real | None = Field(default=None, ge=0.0, le=1.0)
    confidence: Real = Field(default=1.0, ge=0.0, le=1.0)
    occurred_at: datetime | None = None
    classified: Classified | None = Field(default=None, alias="_classified")
    position: int | None = Field(default=None, alias="_position")  # its place in a `sequence` batch
    index: int | None = Field(default=None, alias="_index")  # its place in the batch's items (for its result)
    context: str | None = Field(default=None, alias="_context")  # the turns it follows, to embed it after them
    placement: Placement | None = Field(default=None, alias="_document")

    _content = field_validator("content")(lambda cls, value: memory_text(value))
    _aware = field_validator("occurred_at")(lambda cls, value: assume_utc(value))

    @model_validator(mode="after")
    def _occurred_from_metadata(self) -> Self:
        """As the API's item: a document's chunk carries its request's metadata, whose `timestamp` dates it."""
        if self.occurred_at is None and self.metadata:
            self.occurred_at = occurred_from_metadata(self.metadata)
        return self

    @field_validator("version")
    @classmethod
    def _known(cls, value: int) -> int:
        if value > CHUNK_ITEM_VERSION:
            raise ValueError(
                f"a chunk item of version {value}, newer than this worker reads ({CHUNK_ITEM_VERSION}): run the "
                "workers of the gateway's release"
            )
        return value

    def stored(self) -> dict[str, Any]:
        """The item as a chunk's JSON holds it."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    @classmethod
    def store(cls, item: MemoryCreate, **planned: Any) -> dict[str, Any]:
        """What `ChunkItem(**item, **planned).stored()` gives, for an item already validated, without validating it
        again (a batch plans tens of thousands): `planned` names this model's own fields (`classified`, ...). Of the
        API's item only the fields this schema has are kept."""
        raw = {"_v": CHUNK_ITEM_VERSION, **item.model_dump(mode="json", include=_ITEM_FIELDS, exclude_none=True)}
        for name, value in planned.items():
            if value is not None:
                raw[cls.model_fields[name].alias or name] = (
                    value.model_dump(mode="json") if isinstance(value, BaseModel) else value
                )
        return raw


# the fields a chunk item takes from the API's item
_ITEM_FIELDS = {"content", "tags", "metadata", "salience", "confidence", "occurred_at"}


class ReembedItem(BaseModel):
    """A memory a re-embed chunk converts."""

    id: uuid.UUID


@dataclass(frozen=True)
class ChunkSpec:
    """One chunk of a job to write: its number in the job, the sector whose queue takes it, its items (JSON)."""

    seq: int
    sector: str
    items: list[dict[str, Any]]


def plan_chunks(
    items: Iterable[tuple[str, dict[str, Any]]],
    *,
    size: int,
    first_seq: int = 0,
    max_cost: int | None = None,
    cost: Callable[[dict[str, Any]], int] | None = None,
) -> list[ChunkSpec]:
    """(sector, item) pairs as chunks of at most `size` items of one sector each: sectors in name order, items
    in their order, numbered from `first_seq`. A sector's items are cut into as few chunks as `size` allows, of
    sizes that differ by one at most (520 at 500: 260 and 260, not 500 and 20), so that two workers sharing a
    sector's chunks finish together. With `max_cost`, also into enough chunks that each holds about that much of
    `cost(item)` at most (a document's: one task is a bounded stretch of model work, which a quieter tenant's
    chunk waits behind at worst)."""
    by_sector: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for sector, item in items:
        by_sector[sector].append(item)
    chunks: list[ChunkSpec] = []
    for sector in sorted(by_sector):
        grouped = by_sector[sector]
        count = -(-len(grouped) // size)
        if max_cost is not None and cost is not None:
            count = min(len(grouped), max(count, -(-sum(cost(item) for item in grouped) // max_cost)))
        small, larger = divmod(len(grouped), count)
        start = 0
        for i in range(count):
            end = start + small + (i < larger)
            chunks.append(ChunkSpec(first_seq + len(chunks), sector, grouped[start:end]))
            start = end
    return chunks
