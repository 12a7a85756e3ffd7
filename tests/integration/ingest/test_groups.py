"""Small uploads claimed in groups: one tenant's never-tried documents claimed by one statement, read by one and
parsed in one sandboxed child, then planned in one transaction, each document in a savepoint; one document's failure
fails that document only, and no other tenant's document joins the group."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text

from shared.ingest.pipeline import run_ingest
from shared.storage import jobs as job_store
from tests.integration.ingest.test_pipeline import staged
from tests.unit.ingest import samples

pytestmark = pytest.mark.integration


def _documents(db, tenant: str, job_ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[str, int, str | None]]:
    with db.session(tenant) as s:
        rows = s.execute(
            text(
                "SELECT d.job_id, d.status, j.attempts, d.error FROM documents d JOIN jobs j ON j.id = d.job_id "
                "WHERE d.job_id = ANY(:ids)"
            ),
            {"ids": job_ids},
        ).all()
    return {r.job_id: (r.status, r.attempts, r.error) for r in rows}


def _planned_chunks(db, tenant: str, job_id: uuid.UUID) -> int:
    with db.session(tenant) as s:
        return int(s.execute(text("SELECT count(*) FROM job_chunks WHERE job_id = :j"), {"j": job_id}).scalar_one())


def test_a_tenants_small_uploads_are_parsed_together_and_each_is_planned_or_failed_alone(
    db, settings, tenant, tmp_path
):
    notes = tmp_path / "notes.txt"
    notes.write_text(samples.PLAIN_TEXT)
    guide = tmp_path / "guide.md"
    guide.write_text(samples.MARKDOWN)
    report = samples.docx_file(tmp_path / "report.docx")
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4\n1 0 obj << /Type /Catalog >> garbage, no xref, no trailer\n")
    ours = [staged(db, tenant, path).job_id for path in (notes, guide, report, broken)]
    neighbour = f"{tenant}-n"
    page = tmp_path / "page.html"
    page.write_text(samples.ARTICLE_HTML)
    theirs = staged(db.bound(neighbour), neighbour, page).job_id

    outcome = run_ingest(db, settings, ours[0])

    assert outcome.status == "planned" and outcome.chunks
    by_job = {c.chunks[0].job_id if c.chunks else None: c for c in outcome.companions}
    assert len(outcome.companions) == 3
    assert [c.status for c in outcome.companions] == ["planned", "planned", "failed"]
    assert "not a readable PDF" in (outcome.companions[2].error or "")
    assert set(by_job) - {None} == set(ours[1:3])
    states = _documents(db, tenant, ours)
    assert [states[j][0] for j in ours] == ["embedding", "embedding", "embedding", "failed"]
    assert [states[j][1] for j in ours] == [1, 1, 1, 1]  # one attempt each, counted once
    assert all(_planned_chunks(db, tenant, j) >= 1 for j in ours[:3]) and _planned_chunks(db, tenant, ours[3]) == 0
    # The neighbour's document was not touched: queued, never tried, its upload still staged.
    assert _documents(db.bound(neighbour), neighbour, [theirs])[theirs][:2] == ("queued", 0)
    # The companions' own messages arrive later: each finds its document planned or failed and does nothing more.
    planned = {j: _planned_chunks(db, tenant, j) for j in ours}
    for job_id in ours[1:]:
        assert run_ingest(db, settings, job_id).status == "skipped"
    assert {j: _planned_chunks(db, tenant, j) for j in ours} == planned
    with db.session(tenant) as s:
        failed = job_store.get_job(s, ours[3])
    assert failed["status"] == "failed" and "not a readable PDF" in failed["error"]


def test_with_grouping_off_each_upload_is_its_own_step(db, settings, tenant, tmp_path):
    paths = []
    for number in range(3):
        path = tmp_path / f"n{number}.txt"
        path.write_text(f"Entry {number}. " + samples.PLAIN_TEXT)
        paths.append(path)
    jobs = [staged(db, tenant, path).job_id for path in paths]
    alone = settings.model_copy(update={"ingest_group_documents": 1})
    outcome = run_ingest(db, alone, jobs[0])
    assert outcome.status == "planned" and outcome.companions == []
    assert [state[0] for state in _documents(db, tenant, jobs).values()].count("queued") == 2
    grouped = run_ingest(db, settings, jobs[1])
    assert grouped.status == "planned" and [c.status for c in grouped.companions] == ["planned"]


def test_a_group_is_planned_in_one_transaction_and_a_documents_own_database_error_fails_it_alone(
    db, settings, tenant, tmp_path
):
    paths = []
    for number in range(3):
        path = tmp_path / f"g{number}.txt"
        path.write_text(f"Item {number}. " + samples.PLAIN_TEXT)
        paths.append(path)
    jobs = [staged(db, tenant, path).job_id for path in paths]
    # the middle document's first chunk is taken already: its plan breaks the chunks' primary key (a real error of
    # the database), rolled back to its savepoint
    with db.session(tenant) as s:
        s.execute(
            text(
                "INSERT INTO job_chunks (job_id, seq, sector, item_count, items) "
                "VALUES (:j, 0, 'semantic', 0, CAST('[]' AS jsonb))"
            ),
            {"j": jobs[1]},
        )

    outcome = run_ingest(db, settings, jobs[0])

    assert outcome.status == "planned"
    assert [c.status for c in outcome.companions] == ["retry", "planned"]
    assert "UniqueViolation" in (outcome.companions[0].error or "")
    states = _documents(db, tenant, jobs)
    assert [states[j][0] for j in jobs] == ["embedding", "queued", "embedding"]
    assert "UniqueViolation" in (states[jobs[1]][2] or "")
    assert _planned_chunks(db, tenant, jobs[0]) >= 1 and _planned_chunks(db, tenant, jobs[2]) >= 1
    assert _planned_chunks(db, tenant, jobs[1]) == 1  # only the row put there: nothing of its plan was kept
    with db.session(tenant) as s:  # its upload is still staged for the retry
        staged_parts = s.execute(
            text(
                "SELECT count(*) FROM document_uploads u JOIN documents d ON d.id = u.document_id WHERE d.job_id = :j"
            ),
            {"j": jobs[1]},
        ).scalar_one()
    assert staged_parts >= 1
