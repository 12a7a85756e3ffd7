"""A parser child's answer is JSON, decoded into plain data or one of our own errors, whatever it claims."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime

from shared.errors import ExtractionFailed, InvalidInput, ServiceUnavailable
from shared.ingest import answers
from shared.ingest.confine import Report
from shared.ingest.elements import Element, Extracted
from shared.ingest.formats import Format

REPORT = Report(network="network namespace", filtered=True, uid=2_000_000_123, own_uid=True)


def test_an_extracted_document_comes_back_whole_with_its_report():
    sent = datetime(2024, 3, 2, 9, tzinfo=UTC)
    extracted = Extracted(
        format=Format.EML,
        elements=[Element("Dear volunteers,", "NarrativeText", {"sent": sent, "languages": ("eng",)})],
        metadata={"format": "eml", "subject": "Heron count"},
    )
    answer = answers.decode(answers.encode(extracted, REPORT))
    assert answer.error is None and answer.report == REPORT
    assert answer.value == Extracted(
        format=Format.EML,
        elements=[Element("Dear volunteers,", "NarrativeText", {"sent": sent.isoformat(), "languages": ["eng"]})],
        metadata={"format": "eml", "subject": "Heron count"},
    )
    assert answers.decode(answers.encode({"pid": 7}, None)).value == {"pid": 7}
    assert answers.decode(answers.encode("h\u00e9ron \u9e6d \udc80", None)).value == "h\u00e9ron \u9e6d \udc80"


def test_errors_keep_our_classes_and_nothing_else():
    refused = answers.decode(answers.encode_error(InvalidInput, "bad", {"why": "test"}, REPORT))
    assert isinstance(refused.error, InvalidInput) and refused.error.details == {"why": "test"}
    unavailable = answers.decode(answers.encode_error(ServiceUnavailable, "no", None, None))
    assert isinstance(unavailable.error, ServiceUnavailable)
    claimed = b'{"error": {"class": "SystemExit", "message": "bye", "details": "not a dict"}, "report": null}'
    error = answers.decode(claimed).error
    assert type(error) is ExtractionFailed and error.message == "bye" and error.details is None


def test_anything_else_is_a_malformed_answer():
    for payload in (
        pickle.dumps({"value": 1}),
        b"[]",
        b'{"extracted": {"format": "exe", "elements": [], "metadata": {}}}',
        b'{"extracted": {"format": "pdf", "elements": [[1, "Text", {}]], "metadata": {}}}',
        b'{"value": 1, "report": {"network": ""}}',
    ):
        error = answers.decode(payload).error
        assert isinstance(error, ExtractionFailed) and "malformed answer" in error.message, payload
