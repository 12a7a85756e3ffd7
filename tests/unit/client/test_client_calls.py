"""What the client sends for each call (a real server on loopback records it), its settings, pagination through
every page, and following jobs."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime

import pytest
from mnemoflow_client import AsyncMnemoflow, JobFailed, JobGroup, JobPublic, Mnemoflow, WaitTimeout

from tests.unit.client.conftest import Answer, FakeGateway, Seen
from tests.unit.client.test_retry import MEMORY


def job(job_id: str, status: str, done: int, total: int, error: str | None = None) -> dict:
    stamp = "2024-05-01T10:00:00Z"
    return {
        "id": job_id,
        "kind": "batch",
        "status": status,
        "progress": {"done": done, "total": total},
        "attempts": 1,
        "error": error,
        "result": {},
        "created_at": stamp,
        "updated_at": stamp,
        "started_at": None,
        "finished_at": None,
    }


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch, fake_gateway: FakeGateway):
    monkeypatch.setenv("MNEMOFLOW_URL", fake_gateway.url + "/")
    monkeypatch.setenv("MNEMOFLOW_API_KEY", "k-123")
    with Mnemoflow() as client:
        client.sectors()
    assert client.settings.base_url == fake_gateway.url
    assert fake_gateway.seen[0].headers["authorization"] == "Bearer k-123"
    assert fake_gateway.seen[0].headers["user-agent"].startswith("mnemoflow-client/")


def test_without_settings_the_local_gateway_and_no_key(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("MNEMOFLOW_URL", raising=False)
    monkeypatch.delenv("MNEMOFLOW_API_KEY", raising=False)
    client = Mnemoflow()
    assert client.settings.base_url == "http://127.0.0.1:8080"
    assert "Authorization" not in client.settings.headers
    client.close()


def test_the_default_user_id_goes_with_each_call_unless_one_is_named(fake_gateway: FakeGateway):
    with Mnemoflow(fake_gateway.url, user_id="alice") as client:
        fake_gateway.script = [Answer(200, MEMORY | {"deduplicated": False})]
        client.add("tea", tags=["prefs"], occurred_at=datetime(2024, 5, 1, tzinfo=UTC))
        fake_gateway.script = [Answer(200, MEMORY)]
        client.get(MEMORY["id"], user_id="bob")
    add, get = fake_gateway.seen
    assert add.json() == {
        "content": "tea",
        "tags": ["prefs"],
        "user_id": "alice",
        "occurred_at": "2024-05-01T00:00:00+00:00",
    }
    assert get.query == {"user_id": ["bob"]}


def test_a_query_sends_its_filters_under_the_gateways_names(fake_gateway: FakeGateway):
    fake_gateway.script = [Answer(200, {"query": "tea", "matches": []})]
    with Mnemoflow(fake_gateway.url) as client:
        client.query(
            "tea",
            k=3,
            tags=["prefs"],
            sector="semantic",
            start_time="2024-01-01",
            occurred_before=datetime(2024, 6, 1, tzinfo=UTC),
            explain=True,
            token_budget=200,
            reinforce=False,
            retrieval={"dense": False},
        )
    assert fake_gateway.seen[0].json() == {
        "query": "tea",
        "k": 3,
        "filters": {
            "sector": "semantic",
            "tags": ["prefs"],
            "startTime": "2024-01-01",
            "occurred_before": "2024-06-01T00:00:00+00:00",
        },
        "explain": True,
        "token_budget": 200,
        "reinforce": False,
        "retrieval": {"dense": False},
    }


def test_a_file_is_uploaded_as_a_form_with_its_options(fake_gateway: FakeGateway, tmp_path):
    path = tmp_path / "notes.md"
    path.write_text("# Notes\n\nThe ferry leaves at noon.\n")
    accepted = {
        "job_id": str(uuid.uuid4()),
        "document_id": str(uuid.uuid4()),
        "status": "queued",
        "document_status": "queued",
        "format": "md",
        "status_url": "/jobs/x",
        "document_url": "/documents/y",
    }
    fake_gateway.script = [Answer(202, accepted)]
    with Mnemoflow(fake_gateway.url) as client:
        answer = client.ingest_file(path, tags=["trip", "notes"], metadata={"by": "noa"}, chunk_size=256)
    assert answer.format == "md"
    seen = fake_gateway.seen[0]
    assert seen.headers["content-type"].startswith("multipart/form-data")
    assert b'filename="notes.md"' in seen.body and b"The ferry leaves at noon." in seen.body
    for field, value in (("tags", "trip,notes"), ("metadata", json.dumps({"by": "noa"})), ("chunk_size", "256")):
        assert f'name="{field}"\r\n\r\n{value}\r\n'.encode() in seen.body


def test_bytes_sent_in_the_body_go_base64_encoded(fake_gateway: FakeGateway):
    fake_gateway.script = [Answer(202, {})]
    with Mnemoflow(fake_gateway.url) as client, pytest.raises(Exception):  # noqa: B017 - the empty answer
        client.ingest(b"%PDF-1.4 ...", "pdf")
    assert fake_gateway.seen[0].json() == {"content_type": "pdf", "data": "JVBERi0xLjQgLi4u", "encoding": "base64"}


def _pages(items: list[dict], inserted_after_first: dict | None = None):
    """A /memory/all that serves `items` newest first, and inserts one more at the head after the first page."""
    state = {"items": list(items), "calls": 0}

    def handle(seen: Seen) -> Answer:
        offset, limit = int(seen.query["u"][0]), int(seen.query["l"][0])
        state["calls"] += 1
        page = state["items"][offset : offset + limit]
        answer = Answer(200, {"items": page, "total": len(state["items"]), "offset": offset, "limit": limit})
        if inserted_after_first and state["calls"] == 1:
            state["items"].insert(0, inserted_after_first)
        return answer

    return handle


def test_iter_memories_pages_through_every_memory_once(fake_gateway: FakeGateway):
    items = [MEMORY | {"id": str(uuid.uuid4()), "content": f"m{i}"} for i in range(7)]
    fake_gateway.handler = _pages(items)
    with Mnemoflow(fake_gateway.url) as client:
        listed = [m.content for m in client.iter_memories(page_size=3, tags=["a", "b"])]
    assert listed == [f"m{i}" for i in range(7)]
    assert [seen.query["u"] for seen in fake_gateway.seen] == [["0"], ["3"], ["6"]]
    assert fake_gateway.seen[0].query["tags"] == ["a", "b"]


def test_a_memory_added_while_paging_does_not_make_another_come_twice(fake_gateway: FakeGateway):
    items = [MEMORY | {"id": str(uuid.uuid4()), "content": f"m{i}"} for i in range(6)]
    fake_gateway.handler = _pages(items, inserted_after_first=MEMORY | {"id": str(uuid.uuid4()), "content": "new"})
    with Mnemoflow(fake_gateway.url) as client:
        listed = [m.content for m in client.iter_memories(page_size=3)]
    assert listed == [f"m{i}" for i in range(6)]


def test_the_async_iterator_pages_alike(fake_gateway: FakeGateway):
    items = [MEMORY | {"id": str(uuid.uuid4()), "content": f"m{i}"} for i in range(5)]
    fake_gateway.handler = _pages(items)

    async def listed() -> list[str]:
        async with AsyncMnemoflow(fake_gateway.url) as client:
            return [m.content async for m in client.iter_memories(page_size=2)]

    assert asyncio.run(listed()) == [f"m{i}" for i in range(5)]


def test_wait_reports_each_step_of_progress_and_returns_the_last_state(fake_gateway: FakeGateway):
    job_id = str(uuid.uuid4())
    steps = [job(job_id, "queued", 0, 30), job(job_id, "running", 10, 30), job(job_id, "running", 10, 30)]
    fake_gateway.script = [Answer(200, s) for s in [*steps, job(job_id, "succeeded", 30, 30)]]
    seen: list[tuple[str, int]] = []

    def moved(state: JobPublic) -> None:
        seen.append((state.status, state.progress["done"]))

    with Mnemoflow(fake_gateway.url) as client:
        final = client.wait(job_id, poll_interval=0.01, on_progress=moved)
    assert final.status == "succeeded"
    assert seen == [("queued", 0), ("running", 10), ("succeeded", 30)]


def test_wait_raises_for_a_failed_job_when_asked_and_after_its_timeout(fake_gateway: FakeGateway):
    job_id = str(uuid.uuid4())
    fake_gateway.script = [Answer(200, job(job_id, "failed", 0, 5, error="the provider failed"))]
    with Mnemoflow(fake_gateway.url) as client:
        with pytest.raises(JobFailed, match="the provider failed") as raised:
            client.wait(job_id, check=True)
        assert raised.value.job.status == "failed"
        fake_gateway.handler = lambda seen: Answer(200, job(job_id, "running", 1, 5))
        with pytest.raises(WaitTimeout) as timed_out:
            client.wait(job_id, poll_interval=0.01, timeout=0.05)
        assert timed_out.value.job.progress == {"done": 1, "total": 5}


def test_a_group_of_jobs_adds_up_their_progress_and_asks_about_the_oldest_unfinished_first():
    ids = [str(uuid.uuid4()) for _ in range(3)]
    group = JobGroup()
    for job_id, total in zip(ids, (10, 20, 30), strict=True):
        group.add(job_id, total=total)
    assert (group.done, group.total, group.finished) == (0, 60, False)
    group.update(JobPublic.model_validate(job(ids[0], "succeeded", 10, 10)))
    group.update(JobPublic.model_validate(job(ids[1], "running", 5, 20)))
    assert (group.done, group.total) == (15, 60)
    assert [str(i) for i in group.unfinished()] == ids[1:]


def test_wait_all_follows_every_job_until_each_has_ended(fake_gateway: FakeGateway):
    ids = [str(uuid.uuid4()) for _ in range(3)]
    polls = {i: 0 for i in ids}

    def handle(seen: Seen) -> Answer:
        job_id = seen.path.rsplit("/", 1)[1]
        polls[job_id] += 1
        done = min(10, polls[job_id] * 5)
        return Answer(200, job(job_id, "succeeded" if done == 10 else "running", done, 10))

    fake_gateway.handler = handle
    progress: list[tuple[int, int]] = []
    with Mnemoflow(fake_gateway.url) as client:
        final = client.wait_all(ids, poll_interval=0.01, on_progress=lambda g: progress.append((g.done, g.total)))
    assert [str(j.id) for j in final] == ids and all(j.status == "succeeded" for j in final)
    dones = [done for done, _ in progress]
    assert dones == sorted(dones) and progress[-1] == (30, 30)
