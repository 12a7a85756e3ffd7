"""Queue and task names shared by the gateway (which enqueues by name) and the workers. Import-light."""

from __future__ import annotations

from enum import StrEnum

from shared.sectors import SECTORS


class Queue(StrEnum):
    INGEST = "ingest"
    EMBED_EPISODIC = "embed.episodic"
    EMBED_SEMANTIC = "embed.semantic"
    EMBED_PROCEDURAL = "embed.procedural"
    EMBED_EMOTIONAL = "embed.emotional"
    EMBED_REFLECTIVE = "embed.reflective"
    MAINTENANCE = "maintenance"


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
    DECAY_CYCLE = "mnemoflow.decay.cycle"
    INGEST_DOCUMENT = "mnemoflow.ingest.document"


# Where a task goes when the caller does not say (sector tasks always name their queue).
DEFAULT_QUEUE: dict[str, str] = {  # values are Queue members (str)
    TaskName.REINFORCE_HITS: Queue.MAINTENANCE,
    TaskName.REINFORCE_BATCH: Queue.MAINTENANCE,
    TaskName.SWEEP_JOBS: Queue.MAINTENANCE,
    TaskName.PRUNE_WAYPOINTS: Queue.MAINTENANCE,
    TaskName.MERGE_FRESH: Queue.MAINTENANCE,
    TaskName.REEMBED_PLAN: Queue.MAINTENANCE,
    TaskName.REEMBED_FINISH: Queue.MAINTENANCE,
    TaskName.PRUNE_EMBED_LOGS: Queue.MAINTENANCE,
    TaskName.DECAY_CYCLE: Queue.MAINTENANCE,
    TaskName.INGEST_DOCUMENT: Queue.INGEST,
}
