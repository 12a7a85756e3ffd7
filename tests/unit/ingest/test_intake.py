"""Pure parts of ingestion's intake and failure handling: URL identity, declared types, upload options, finality."""

from __future__ import annotations

import pytest

from shared.api.ingest import IngestConfig, form_params
from shared.config import Settings
from shared.errors import ExtractionFailed, InvalidInput, PayloadTooLarge, UnsupportedMedia, UpstreamFailed
from shared.ingest import Format
from shared.ingest.intake import check_format, is_textual, normalize_url, url_hash
from shared.ingest.outcome import is_final


@pytest.mark.parametrize(
    ("given", "normal"),
    [
        ("HTTP://Example.COM:80/a?b=1#frag", "http://example.com/a?b=1"),
        ("https://x.org:443", "https://x.org/"),
        ("https://x.org:8443/p", "https://x.org:8443/p"),
        ("  http://[::1]:8080/x ", "http://[::1]:8080/x"),
        ("http://éx.com/%7Efoo", "http://xn--x-9fa.com/%7Efoo"),
    ],
)
def test_a_url_has_one_spelling_and_so_one_identity(given: str, normal: str) -> None:
    assert normalize_url(given) == normal
    assert url_hash(normalize_url(given)) == url_hash(normal)


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("ftp://example.org/file", "only http and https"),
        ("file:///etc/passwd", "only http and https"),
        ("http://user:secret@example.org/", "password"),
        ("not a url", "only http and https"),
        ("http://example.org/" + "a" * 3000, "limit"),
    ],
)
def test_bad_urls_are_refused_with_a_reason(url: str, fragment: str) -> None:
    with pytest.raises(InvalidInput, match=fragment):
        normalize_url(url)


def test_declared_types_as_names_or_mime_types_must_fit_the_bytes() -> None:
    check_format(Format.PDF, "pdf")
    check_format(Format.PDF, "application/pdf")
    check_format(Format.PDF, None)
    check_format(Format.MARKDOWN, "txt")  # plain text and Markdown are read the same way
    check_format(Format.MP3, "audio")
    check_format(Format.WAV, "audio/x-wav")
    for fmt, declared in ((Format.TEXT, "docx"), (Format.PDF, "text/html"), (Format.MP4, "audio"), (Format.PDF, "exe")):
        with pytest.raises(UnsupportedMedia):
            check_format(fmt, declared)
    assert is_textual("md") and is_textual("text/html") and not is_textual("pdf") and not is_textual(None)


def test_upload_options_come_from_form_fields() -> None:
    options = form_params({"metadata": '{"a": 1}', "tags": "x, y,", "chunk_size": "300", "preserve_metadata": "false"})
    assert options.metadata == {"a": 1} and options.tags == ["x", "y"]
    assert options.job_params()["config"] == {"chunk_size": 300, "preserve_metadata": False}
    for fields in (
        {"metadata": "[1]"},
        {"metadata": "{"},
        {"chunk_size": "64", "chunk_overlap": "64"},
        {"occurred_at": "last spring"},
    ):
        with pytest.raises(ValueError):
            form_params(fields)
    dated = form_params({"occurred_at": "2023-05-08T01:30:00+02:00"})
    assert dated.job_params()["occurred_at"] == "2023-05-08T01:30:00+02:00"
    assert form_params({"occurred_at": "2023-05-08"}).job_params()["occurred_at"] == "2023-05-08T00:00:00+00:00"
    assert "occurred_at" not in form_params({}).job_params()


def test_chunk_sizes_fall_back_to_the_settings_and_a_small_chunk_overlaps_by_an_eighth() -> None:
    assert IngestConfig().sizes(2048, 256) == (2048, 256)
    assert IngestConfig(chunk_size=512).sizes(2048, 256) == (512, 256)
    assert IngestConfig(chunk_size=128).sizes(2048, 256) == (128, 16)  # the default overlap would not fit
    assert IngestConfig(chunk_size=128, chunk_overlap=0).sizes(2048, 256) == (128, 0)
    assert IngestConfig(chunk_overlap=1000).sizes(2048, 256) == (2048, 1000)
    with pytest.raises(ValueError, match="server default"):
        IngestConfig(chunk_overlap=3000).sizes(2048, 256)


def test_only_errors_that_a_retry_may_change_are_retried() -> None:
    assert is_final(ExtractionFailed("corrupt"))
    assert is_final(UnsupportedMedia("mislabelled"))
    assert is_final(PayloadTooLarge("too big"))
    assert is_final(InvalidInput("refused to fetch: loopback"))
    assert is_final(UpstreamFailed("gone", details={"status": 404}))
    assert not is_final(UpstreamFailed("busy", details={"status": 503}))
    assert not is_final(UpstreamFailed("slow down", details={"status": 429}))
    assert not is_final(UpstreamFailed("timed out", details={"url": "http://x"}))
    assert not is_final(ConnectionError("database went away"))


def test_allowed_networks_are_checked_and_chunking_must_overlap_less_than_it_holds() -> None:
    assert Settings(ingest_allowed_networks="10.1.0.0/16, fd00::/8").ingest_allowed_networks == [
        "10.1.0.0/16",
        "fd00::/8",
    ]
    with pytest.raises(ValueError, match="not a network"):
        Settings(ingest_allowed_networks="intranet")
    with pytest.raises(ValueError, match="CHUNK_OVERLAP"):
        Settings(ingest_chunk_size=100, ingest_chunk_overlap=100)
