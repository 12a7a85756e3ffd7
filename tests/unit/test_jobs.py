"""The gateway-worker contract: what each message carries on the wire and where it goes; what a chunk stores."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from shared.api.memories import BatchRequest, MemoryAdd, MemoryCreate
from shared.errors import InvalidInput
from shared.jobs import (
    CHUNK_ITEM_VERSION,
    DEFAULT_QUEUE,
    ChunkItem,
    Classified,
    IngestDocument,
    JobKind,
    Message,
    Placement,
    ReembedChunk,
    ReinforceBatch,
    ReinforceHits,
    RunDecayCycle,
    StoreChunk,
    chunk_message,
    plan_chunks,
)
from shared.memory.batches import plan_batch
from shared.memory.limits import InputLimits
from shared.memory.sequence import SequenceContext

JOB = uuid.UUID(int=7)


def test_a_chunk_message_goes_to_its_sector_queue_and_its_sector_does_not_travel():
    message = StoreChunk(job_id=JOB, seq=3, sector="emotional", user_id="u")
    assert message.queue == "embed.emotional"
    assert message.kwargs() == {"job_id": str(JOB), "seq": 3, "user_id": "u"}  # the tenant travels, the sector not
    assert StoreChunk.received(message.kwargs()) == StoreChunk(job_id=JOB, seq=3, user_id="u")
    with pytest.raises(ValueError, match="needs its chunk's sector"):
        _ = StoreChunk.received(message.kwargs()).queue
    with pytest.raises(ValueError, match="unknown sector"):
        _ = StoreChunk(job_id=JOB, seq=0, sector="dreams", user_id="u").queue


def test_every_message_names_a_task_with_a_queue():
    for message in (IngestDocument(job_id=JOB, user_id="u"), RunDecayCycle(), ReinforceBatch(events=[])):
        assert message.queue == DEFAULT_QUEUE[message.task]
    reembed = ReembedChunk(job_id=JOB, seq=1, sector="semantic")
    assert chunk_message(JobKind.REEMBED, JOB, 1, "semantic", "u") == reembed  # the store's, not a tenant's
    assert chunk_message(JobKind.BATCH, JOB, 1, "semantic", "u") == StoreChunk(
        job_id=JOB, seq=1, sector="semantic", user_id="u"
    )
    assert isinstance(chunk_message(JobKind.INGEST, JOB, 1, "semantic", "u"), StoreChunk)


def test_a_message_round_trips_as_json_and_refuses_what_it_does_not_know():
    hit = uuid.UUID(int=9)
    event = ReinforceHits(event_id="query:1", user_id="u", memory_ids=[hit], traversed=[(JOB, hit)], regenerate=True)
    wire = ReinforceBatch(events=[event]).kwargs()
    assert wire == {
        "events": [
            {
                "event_id": "query:1",
                "user_id": "u",
                "memory_ids": [str(hit)],
                "traversed": [[str(JOB), str(hit)]],
                "reinforce": True,
                "regenerate": True,
            }
        ]
    }
    assert ReinforceBatch.received(wire).events == [event]
    with pytest.raises(ValidationError):
        IngestDocument.received({"job_id": str(JOB), "sneaky": 1})
    assert issubclass(IngestDocument, Message)


def test_a_chunk_item_is_stored_under_the_keys_the_workers_read():
    placed = ChunkItem(
        content="Chapter one",
        occurred_at=datetime(2023, 5, 9, tzinfo=UTC),
        classified=Classified(sectors=["semantic", "episodic"], confidence=0.6),
        position=4,
        context="before",
        placement=Placement(document_id=JOB, chunk_index=2),
    )
    stored = placed.stored()
    assert stored["_classified"] == {"sectors": ["semantic", "episodic"], "confidence": 0.6}
    assert (stored["_position"], stored["_context"]) == (4, "before")
    assert stored["_document"] == {"document_id": str(JOB), "chunk_index": 2}
    assert "user_id" not in stored and stored["occurred_at"] == "2023-05-09T00:00:00Z"
    assert ChunkItem.model_validate(stored) == placed  # what the worker reads back
    item = MemoryCreate(content="Chapter one", occurred_at=datetime(2023, 5, 9, tzinfo=UTC), user_id="u")
    fast = ChunkItem.store(item, classified=placed.classified, position=4, context="before", placement=placed.placement)
    assert fast == stored  # the planners' fast path writes the same JSON


def test_an_item_timed_by_its_metadata_carries_that_time_to_its_chunk():
    item = MemoryCreate(content="x", metadata={"date": "2023-05-08"})
    stored = ChunkItem.store(item)
    assert stored["occurred_at"] == "2023-05-08T00:00:00Z" and stored["metadata"] == {"date": "2023-05-08"}
    assert ChunkItem.model_validate(stored).occurred_at == datetime(2023, 5, 8, tzinfo=UTC)


def test_chunks_hold_one_sector_each_in_name_order_numbered_from_the_first():
    items = [("semantic", {"n": 1}), ("episodic", {"n": 2}), ("semantic", {"n": 3}), ("semantic", {"n": 4})]
    chunks = plan_chunks(items, size=2, first_seq=5)
    assert [(c.seq, c.sector, c.items) for c in chunks] == [
        (5, "episodic", [{"n": 2}]),
        (6, "semantic", [{"n": 1}, {"n": 3}]),
        (7, "semantic", [{"n": 4}]),
    ]


def test_a_sectors_items_are_cut_into_as_few_chunks_as_the_size_allows_of_even_sizes():
    items = [("semantic", {"n": n}) for n in range(520)] + [("episodic", {"n": n}) for n in range(7)]
    chunks = plan_chunks(items, size=500)
    assert [(c.sector, len(c.items)) for c in chunks] == [("episodic", 7), ("semantic", 260), ("semantic", 260)]
    assert [item["n"] for c in chunks[1:] for item in c.items] == list(range(520))  # every item once, in order
    sizes = [len(c.items) for c in plan_chunks([("semantic", {"n": n}) for n in range(1001)], size=500)]
    assert sizes == [334, 334, 333]


def test_a_batch_is_planned_item_by_item_and_the_first_item_over_a_limit_is_named():
    body = BatchRequest(items=[{"content": "I went to the park"}, {"content": "how to install it"}], sequence=True)
    chunks = plan_batch(body, limits=InputLimits(), context=SequenceContext(), chunk_size=10)
    stored = {item["content"]: item for chunk in chunks for item in chunk.items}
    assert stored["how to install it"]["_position"] == 1
    assert stored["how to install it"]["_context"] == "I went to the park"
    assert "_context" not in stored["I went to the park"]  # nothing before the first turn
    too_long = BatchRequest(items=[{"content": "short"}, {"content": "far too long for it"}])
    with pytest.raises(InvalidInput, match=r"items\[1\] is 19 characters; the limit is 10"):
        plan_batch(too_long, limits=InputLimits(max_content_chars=10), context=SequenceContext(), chunk_size=10)


def test_a_chunk_item_has_a_schema_of_its_own_not_the_apis():
    # what the release before stored (no version): read as version 1
    before = {"content": "Chapter one", "tags": ["t"], "metadata": {"a": 1}, "confidence": 1.0, "_index": 3}
    read = ChunkItem.model_validate(before)
    assert (read.version, read.content, read.tags, read.index) == (CHUNK_ITEM_VERSION, "Chapter one", ["t"], 3)
    # a field of the API's item that the stored form does not have stays out of it
    follows = uuid.UUID(int=7)
    stored = ChunkItem.store(MemoryAdd(content="next turn", follows=follows))
    assert "follows" not in stored and stored["_v"] == CHUNK_ITEM_VERSION
    assert ChunkItem.model_validate(stored).content == "next turn"
    # an item planned by a newer release is refused with what to do, not misread
    with pytest.raises(ValidationError, match="newer than this worker reads"):
        ChunkItem.model_validate({**before, "_v": CHUNK_ITEM_VERSION + 1})
    # and the worker still checks what a memory can hold
    with pytest.raises(ValidationError):
        ChunkItem.model_validate({"content": "   "})
    with pytest.raises(ValidationError):
        ChunkItem.model_validate({"content": "x", "sneaky": 1})


def test_a_document_chunk_dated_by_its_metadata_reads_back_dated():
    # a document's chunks are planned without validation (model_construct) and carry the request's metadata: the
    # worker dates them by its `timestamp`, as the API's item would be
    planned = ChunkItem.model_construct(content="Minutes", metadata={"timestamp": "2023-05-08T10:00:00Z"}).stored()
    assert "occurred_at" not in planned
    assert ChunkItem.model_validate(planned).occurred_at == datetime(2023, 5, 8, 10, tzinfo=UTC)
