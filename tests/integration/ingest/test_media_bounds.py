"""A recording's transcription is bounded by its duration and a setting, through the real ingest path (the worker's
pipeline, its sandboxed parser, the job and document rows): silence costs its decoding only, and a recording over
MNEMOFLOW_INGEST_MAX_MEDIA_SECONDS fails its job with the limit, from its header, before it is decoded."""

from __future__ import annotations

import os

import pytest

from shared.ingest import pipeline
from shared.storage import documents as document_store
from shared.storage import jobs as job_store
from tests.integration.ingest.test_pipeline import staged
from tests.unit.ingest import samples

pytestmark = pytest.mark.integration

# The attack's file was 26 minutes of silence (133 s of the model's CPU); the quick profile sends 5.
SILENT_MINUTES = 26 if os.environ.get("MNEMOFLOW_TEST_FULL") else 5


def _ingested(db, settings, tenant, path):
    accepted = staged(db, tenant, path)
    assert accepted.job_id is not None
    outcome = pipeline.run_ingest(db, settings, accepted.job_id)
    with db.session() as s:
        job = job_store.get_job(s, accepted.job_id)
        document = document_store.document_of_job(s, accepted.job_id)
    assert job is not None and document is not None
    return outcome, job, document


def test_a_silent_recording_fails_as_silent_without_being_transcribed(db, settings, tenant, tmp_path):
    silent = samples.silent_wav(tmp_path / "silence.wav", seconds=SILENT_MINUTES * 60)
    outcome, job, document = _ingested(db, settings, tenant, silent)
    assert outcome.status == "failed" and job["status"] == "failed" and document["status"] == "failed"
    assert f"no speech recognised in {SILENT_MINUTES * 60}.0 s of wav audio: it is silent throughout" in job["error"]
    assert job["attempts"] == 1  # bad input: not retried


def test_a_recording_over_the_limit_fails_its_job_before_it_is_decoded(db, settings, tenant, tmp_path):
    bounded = settings.model_copy(update={"ingest_max_media_seconds": 600.0})
    long = samples.silent_wav(tmp_path / "long.wav", seconds=11 * 60)
    outcome, job, document = _ingested(db, bounded, tenant, long)
    assert outcome.status == "failed" and document["status"] == "failed"
    assert "11.0 minutes long; the limit is 10.0 minutes (MNEMOFLOW_INGEST_MAX_MEDIA_SECONDS)" in job["error"]
    assert "decodes" not in job["error"] and "no speech" not in job["error"]
