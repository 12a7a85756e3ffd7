"""The short texts the MCP tools answer beside their structured results."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from mnemoflow_client import IngestAccepted, JobPublic, MemoryPage, MemoryPublic, QueryMatch, QueryResponse
from mnemoflow_client.schemas.query import MatchTrace

from services.mcp.render import accepted_text, job_text, memory_text, page_text, preview, recalled_text

NOW = datetime(2024, 5, 1, 7, 30, tzinfo=UTC)
ID = uuid.UUID("00000000-0000-4000-8000-000000000001")


def _memory(content: str, **fields) -> MemoryPublic:
    base = dict(
        id=ID, user_id="alice", content=content, primary_sector="semantic", sectors=["semantic"], tags=[],
        metadata={}, salience=0.42, decay_lambda=0.005, coactivations=0, tier="hot", status="active",
        confidence=1.0, compression="full", created_at=NOW, updated_at=NOW, last_seen_at=NOW,
    )  # fmt: skip
    return MemoryPublic(**(base | fields))


def _job(status: str, progress: dict[str, int], error: str | None = None) -> JobPublic:
    return JobPublic(
        id=ID, kind="ingest", status=status, progress=progress, attempts=1, error=error, result={},
        created_at=NOW, updated_at=NOW, started_at=NOW, finished_at=None,
    )  # fmt: skip


def test_a_preview_is_one_line_cut_with_an_ellipsis():
    assert preview("green\n tea  now") == "green tea now"
    cut = preview("word " * 100, limit=20)
    assert len(cut) <= 20 and cut.endswith("…")


def test_recalled_memories_are_numbered_with_score_id_and_why_when_explained():
    trace = MatchTrace(lexical_rank=1, dense_rank=2, components={"relevance": 0.8, "recency": 0.0})
    match = QueryMatch(
        id=ID, content="Alice prefers green tea", score=0.8123, sectors=["semantic"], primary_sector="semantic",
        path=[str(ID)], salience=0.5, last_seen_at=NOW, trace=trace,
    )  # fmt: skip
    text = recalled_text(QueryResponse(query="tea?", matches=[match]))
    assert text.startswith(f"1. (0.812) Alice prefers green tea  [{ID}, semantic]")
    assert "why: words #1; meaning #2; score relevance 0.80" in text and "recency" not in text
    assert recalled_text(QueryResponse(query="tea?", matches=[])) == "nothing recalled for 'tea?'"


def test_a_memory_shows_its_content_then_what_it_is():
    text = memory_text(_memory("Alice prefers green tea", tags=["prefs", "drinks"]))
    assert (
        text
        == f"Alice prefers green tea\n[{ID}: semantic, salience 0.420, tags prefs, drinks, stored 2024-05-01 07:30]"
    )


def test_a_page_says_which_memories_of_how_many_and_where_the_next_starts():
    page = MemoryPage(items=[_memory("one"), _memory("two")], total=5, offset=2, limit=2)
    assert page_text(page).splitlines() == [
        "memories 3-4 of 5:",
        f"- one  [{ID}, semantic]",
        f"- two  [{ID}, semantic]",
        "(more: offset 4)",
    ]
    assert page_text(MemoryPage(items=[], total=0, offset=0, limit=20)) == "no memories here (0 in all, offset 0)"


def test_a_job_says_its_status_progress_and_error():
    assert job_text(_job("running", {"done": 3, "total": 10})) == f"job {ID} (ingest): running, 3 of 10 done"
    assert job_text(_job("queued", {})) == f"job {ID} (ingest): queued"
    assert job_text(_job("failed", {"done": 0, "total": 2}, "no text")).endswith("failed, 0 of 2 done: no text")


def test_an_ingest_names_its_job_or_the_document_already_stored():
    queued = IngestAccepted(
        job_id=ID, document_id=ID, status="queued", document_status="queued", format="pdf",
        status_url=f"/jobs/{ID}", document_url=f"/documents/{ID}",
    )  # fmt: skip
    assert accepted_text("a.pdf", queued).startswith(f"ingesting a.pdf (pdf): job {ID}, queued")
    existing = queued.model_copy(update={"job_id": None, "status": "existing", "document_status": "done"})
    assert accepted_text("a.pdf", existing) == f"a.pdf is already stored as document {ID} (done)"
