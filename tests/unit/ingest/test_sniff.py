"""Formats come from the bytes: magic numbers, ZIP contents, text heuristics; declared types are only checked."""

from __future__ import annotations

import gzip
import io
import zipfile
from pathlib import Path

import pytest

from shared.errors import UnsupportedMedia
from shared.ingest import Format, sniff
from shared.ingest.sniff import check_declared
from tests.unit.ingest import samples


@pytest.fixture(scope="module")
def documents(sample_dir: Path) -> dict[Format, Path]:
    return {
        Format.PDF: samples.pdf(sample_dir / "sniff.pdf", pages=1),
        Format.DOCX: samples.docx_file(sample_dir / "sniff.docx"),
        Format.PPTX: samples.pptx_file(sample_dir / "sniff.pptx"),
        Format.XLSX: samples.xlsx_file(sample_dir / "sniff.xlsx"),
        Format.EPUB: samples.pandoc_file(sample_dir / "sniff.epub", "epub"),
        Format.ODT: samples.pandoc_file(sample_dir / "sniff.odt", "odt"),
        Format.EML: samples.eml_file(sample_dir / "sniff.eml"),
    }


@pytest.mark.parametrize(
    "fmt", [Format.PDF, Format.DOCX, Format.PPTX, Format.XLSX, Format.EPUB, Format.ODT, Format.EML]
)
def test_document_formats_are_recognised_from_path_and_bytes(documents: dict[Format, Path], fmt: Format) -> None:
    path = documents[fmt]
    assert sniff(path) is fmt
    assert sniff(path.read_bytes()) is fmt


def test_a_misleading_file_name_changes_nothing(documents: dict[Format, Path], tmp_path: Path) -> None:
    disguised = tmp_path / "report.pdf"
    disguised.write_bytes(documents[Format.DOCX].read_bytes())
    assert sniff(disguised) is Format.DOCX


@pytest.mark.parametrize("container", sorted(samples.CODECS))
def test_audio_and_video_containers_are_recognised(speech_wav: Path, tmp_path: Path, container: str) -> None:
    path = samples.reencode(speech_wav, tmp_path / f"clip.{container}", container)
    assert sniff(path) is Format(container)


def test_wav_is_recognised(speech_wav: Path) -> None:
    assert sniff(speech_wav) is Format.WAV


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (samples.ARTICLE_HTML, Format.HTML),
        ("<html><body><p>hi</p></body></html>", Format.HTML),
        ("\ufeff<!doctype html><title>x</title>", Format.HTML),
        ("<div><p>fragment</p><p>of a page</p><a href='/'>home</a></div>", Format.HTML),
        (samples.MARKDOWN, Format.MARKDOWN),
        ("# Title\n\nJust a paragraph.", Format.MARKDOWN),
        ("Intro\n\n- one\n- two\n\nSome **bold** claim.", Format.MARKDOWN),
        (samples.PLAIN_TEXT, Format.TEXT),
        ("Get free stuff at the market on Saturday.", Format.TEXT),
        ("I use 3 < 4 and <b> sometimes in prose.", Format.TEXT),
        ("Ünïcödé text in Latin-1 is still text.", Format.TEXT),
        ("From: a@example.org\nTo: b@example.org\nSubject: hi\n\nBody.", Format.EML),
    ],
)
def test_text_kinds(text: str, expected: Format) -> None:
    assert sniff(text.encode()) is expected


def test_legacy_encodings_are_text() -> None:
    assert sniff("Ünïcödé text, déjà vu, naïve café résumé.".encode("latin-1")) is Format.TEXT
    assert sniff("# Titre\n\nUn paragraphe.".encode("utf-16")) is Format.MARKDOWN


def test_a_pdf_mentioned_in_text_is_not_a_pdf() -> None:
    assert sniff(b"Notes: a PDF file starts with %PDF-1.7 and ends with %%EOF.") is Format.TEXT


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (b"\x89PNG\r\n\x1a\n" + b"\0" * 64, "image/png"),
        (gzip.compress(b"hello"), "gzip"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 600, "binary data"),
        (b"\x1a\x45\xdf\xa3\x42\x82\x88matroska" + b"\0" * 32, "Matroska"),
        (b"RIFF\0\0\0\0WEBPVP8 " + b"\0" * 32, "RIFF"),
        (b"   \n\t  ", "empty"),
    ],
)
def test_unsupported_content_names_what_it_found_and_what_is_supported(content: bytes, named: str) -> None:
    with pytest.raises(UnsupportedMedia) as caught:
        sniff(content)
    assert named in caught.value.message
    assert "pdf, docx" in caught.value.message
    assert caught.value.status_code == 415


def test_zip_archives_are_looked_inside() -> None:
    def archive(entries: dict[str, bytes]) -> bytes:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as out:
            for name, data in entries.items():
                out.writestr(name, data)
        return buffer.getvalue()

    with pytest.raises(UnsupportedMedia, match="a ZIP archive"):
        sniff(archive({"notes.txt": b"hello"}))
    with pytest.raises(UnsupportedMedia, match=r"opendocument\.spreadsheet"):
        sniff(archive({"mimetype": b"application/vnd.oasis.opendocument.spreadsheet"}))
    with pytest.raises(UnsupportedMedia, match="not Word, PowerPoint or Excel"):
        sniff(archive({"[Content_Types].xml": b"<Types/>", "visio/document.xml": b""}))
    with pytest.raises(UnsupportedMedia, match="damaged ZIP"):
        sniff(b"PK\x03\x04" + b"\0" * 100)


def test_declared_types_must_agree_with_the_bytes() -> None:
    check_declared(Format.PDF, "application/pdf")
    check_declared(Format.PDF, None)
    check_declared(Format.PDF, "application/octet-stream")
    check_declared(Format.HTML, "text/html; charset=utf-8")
    check_declared(Format.MARKDOWN, "text/plain")
    check_declared(Format.TEXT, "text/csv")
    check_declared(Format.M4A, "audio/mp4")
    with pytest.raises(UnsupportedMedia, match="declared as application/pdf but the content is docx"):
        check_declared(Format.DOCX, "application/pdf")
    with pytest.raises(UnsupportedMedia, match="declared as image/png but the content is pdf"):
        check_declared(Format.PDF, "image/png")
    with pytest.raises(UnsupportedMedia):
        check_declared(Format.HTML, "text/plain")
