"""The Python client (mnemoflow_client) against the whole stack: the sync and async clients drive every route a
tenant uses, follow jobs with their progress, and raise the gateway's errors as its exceptions."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from mnemoflow_client import (
    AsyncMnemoflow,
    Conflict,
    InvalidInput,
    JobGroup,
    JobPublic,
    Mnemoflow,
    NotFound,
    QueryResponse,
)

from tests.e2e.test_ingest import TRUSTED_HOST, _serve
from tests.unit.ingest import samples

pytestmark = pytest.mark.e2e


@pytest.fixture
def client(gateway: str, tenant: str) -> Iterator[Mnemoflow]:
    with Mnemoflow(gateway, user_id=tenant) as made:
        yield made


@pytest.fixture(scope="module")
def trusted_site() -> Iterator[str]:
    yield from _serve(TRUSTED_HOST)


def test_memories_added_queried_changed_linked_listed_and_deleted(client: Mnemoflow, tenant: str):
    tea = client.add("Alice prefers green tea in the morning", tags=["prefs"], metadata={"source": "chat"})
    assert tea.user_id == tenant and not tea.deduplicated and tea.queryable
    assert client.add("Alice prefers green tea in the morning").deduplicated  # the same memory: safe to retry
    walk = client.add("Alice walks the dog at seven", tags=["routine"], occurred_at="2024-05-01T07:00:00")

    answer = client.query("green tea in the morning", k=3, explain=True, min_score=0)
    assert isinstance(answer, QueryResponse) and answer.matches[0].id == tea.id
    assert answer.matches[0].trace is not None and answer.timings_ms and "total" in answer.timings_ms
    only_routine = client.query("Alice", tags=["routine"], min_score=0)
    assert [m.id for m in only_routine.matches] == [walk.id]
    in_may = client.query("Alice", occurred_after="2024-05-01", occurred_before="2024-05-31", min_score=0)
    assert [m.id for m in in_may.matches] == [walk.id]

    assert client.get(tea.id).metadata == {"source": "chat"}
    changed = client.update(tea.id, tags=["prefs", "drinks"], status="superseded")
    assert changed.tags == ["prefs", "drinks"] and changed.status == "superseded"
    boosted = client.reinforce(walk.id, boost=0.2)
    assert boosted.salience > walk.salience
    linked = client.link(tea.id, walk.id, kind="association", weight=0.5)
    assert (linked.src_id, linked.dst_id, linked.kind) == (tea.id, walk.id, "association")

    page = client.list_memories(limit=1)
    assert page.total == 2 and len(page.items) == 1
    assert {m.id for m in client.iter_memories(page_size=1)} == {tea.id, walk.id}
    assert [m.id for m in client.iter_memories(tags=["drinks"])] == [tea.id]

    assert client.delete(walk.id).id == walk.id
    with pytest.raises(NotFound) as missing:
        client.get(walk.id)
    assert missing.value.status == 404 and missing.value.code == "not_found"
    assert missing.value.message == f"memory {walk.id} not found for user_id {tenant!r}"
    assert missing.value.request_id


def test_a_batch_is_followed_to_its_end_with_growing_progress(client: Mnemoflow, worker, tenant: str):
    items = [f"Ferry timetable note number {i}: the boat leaves pier {i % 7}" for i in range(1500)]
    accepted = client.batch(items, idempotency_key=f"load-{tenant}")
    assert accepted.status == "queued" and accepted.items == 1500
    seen: list[JobPublic] = []
    job = client.wait(accepted, on_progress=seen.append, poll_interval=0.05, timeout=180, check=True)
    assert job.status == "succeeded" and job.progress == {"done": 1500, "total": 1500}
    assert job.result["created"] == 1500
    dones = [state.progress["done"] for state in seen]
    assert dones == sorted(dones) and dones[-1] == 1500 and seen[-1].status == "succeeded"
    assert client.list_memories(limit=1).total == 1500

    again = client.batch(items, idempotency_key=f"load-{tenant}")
    assert (again.status, again.job_id) == ("existing", accepted.job_id)
    with pytest.raises(Conflict) as conflict:
        client.batch(items[:10], idempotency_key=f"load-{tenant}")
    assert conflict.value.details["job_id"] == str(accepted.job_id)

    group = JobGroup([client.batch([f"first {i}" for i in range(40)]), client.batch(["second"] * 3)])
    states = client.wait_all(group, poll_interval=0.05, timeout=120)
    assert [s.status for s in states] == ["succeeded", "succeeded"] and group.done == group.total == 43


def test_documents_uploaded_sent_and_fetched_become_memories(client: Mnemoflow, worker, trusted_site: str, tmp_path):
    notes = tmp_path / "field-guide.md"
    notes.write_text(samples.MARKDOWN)
    accepted = client.ingest_file(notes, tags=["birds"], metadata={"shelf": "b2"})
    assert accepted.status == "queued" and accepted.format == "md"
    job = client.wait(accepted, timeout=120, check=True)
    document = client.document(accepted.document_id)
    assert document.status == "done" and document.memories_total >= 1 and document.job is not None
    assert document.metadata == {"shelf": "b2"} and document.job.id == job.id
    assert client.ingest_file(Path(notes).read_bytes(), filename="again.md").status == "existing"
    with open(notes, "rb") as handle:
        assert client.ingest_file(handle).document_id == accepted.document_id

    sent = client.ingest(samples.PLAIN_TEXT, "txt", wait=True)
    assert sent.job is not None and sent.job.status == "succeeded"
    fetched = client.ingest_url(f"{trusted_site}/article", wait=True)
    assert fetched.job is not None and fetched.job.status == "succeeded"

    listed = client.documents(limit=2)
    assert listed.total == 3 and len(listed.items) == 2
    every = {d.id for d in client.iter_documents(page_size=2)}
    assert every == {accepted.document_id, sent.document_id, fetched.document_id}
    assert [d.id for d in client.iter_documents(status="failed")] == []
    memory = client.get(document.memories[0].id)
    assert memory.document_id == accepted.document_id and "birds" in memory.tags


def test_invalid_requests_raise_the_gateways_message_and_details(client: Mnemoflow):
    with pytest.raises(InvalidInput) as invalid:
        client.query("tea", k=0)
    assert invalid.value.status == 422 and "k" in invalid.value.message
    assert invalid.value.details and invalid.value.details[0]["loc"][-1] == "k"
    with pytest.raises(NotFound):
        client.job(uuid.uuid4())
    with pytest.raises(NotFound):
        client.document(uuid.uuid4())


def test_the_async_client_drives_the_same_routes(gateway: str, worker, tenant: str):
    async def scenario() -> None:
        async with AsyncMnemoflow(gateway, user_id=tenant) as client:
            assert (await client.health())["ok"] is True
            added = await client.add("Kai repairs bicycles on Saturdays", tags=["hobby"])
            found = await client.query("who repairs bicycles?", min_score=0)
            assert found.matches[0].id == added.id
            accepted = await client.batch([f"Bicycle part {i} needs oil" for i in range(600)])
            seen: list[int] = []
            job = await client.wait(accepted, on_progress=lambda j: seen.append(j.progress["done"]), timeout=120)
            assert job.status == "succeeded" and seen == sorted(seen) and seen[-1] == 600
            assert (await client.job(accepted)).id == job.id
            assert (await client.list_memories(limit=5)).total == 601
            listed = [m.id async for m in client.iter_memories(tags=["hobby"])]
            assert listed == [added.id]
            sent = await client.ingest(samples.MARKDOWN, "md")
            assert (await client.wait(sent, timeout=120)).status == "succeeded"
            assert [d.id async for d in client.iter_documents()] == [sent.document_id]
            changed = await client.update(added.id, content="Kai repairs bicycles on Sundays")
            assert changed.content.endswith("Sundays")
            assert (await client.sectors())["stats"]
            await client.delete(added.id)
            with pytest.raises(NotFound):
                await client.get(added.id)

    asyncio.run(scenario())


def test_a_decay_cycle_is_followed_by_its_counts(gateway: str, worker):
    with Mnemoflow(gateway) as operator:
        operator.add("a memory for the decay cycle to walk")
        run = operator.decay(1.0)
        seen = []
        ended = operator.wait_decay(run, on_progress=seen.append, poll_interval=0.05, timeout=120)
        assert ended.status == "succeeded" and ended.log and ended.processed == ended.planned > 0
        assert [r.processed for r in seen] == sorted(r.processed for r in seen)
        assert operator.decay_run(run.id).id == run.id
        assert operator.stats(runs=1)["recent_runs"][0]["id"] == str(run.id)
