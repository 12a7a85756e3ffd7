"""The formats ingestion accepts, what kind of input each is, and which declared media types mean each one."""

from __future__ import annotations

from enum import StrEnum


class Kind(StrEnum):
    DOCUMENT = "document"
    AUDIO = "audio"
    VIDEO = "video"


class Format(StrEnum):
    PDF = "pdf"
    DOCX = "docx"
    PPTX = "pptx"
    XLSX = "xlsx"
    ODT = "odt"
    EPUB = "epub"
    EML = "eml"
    HTML = "html"
    MARKDOWN = "md"
    TEXT = "txt"
    MP3 = "mp3"
    WAV = "wav"
    M4A = "m4a"
    OGG = "ogg"
    FLAC = "flac"
    WEBM = "webm"
    MP4 = "mp4"
    MOV = "mov"
    AVI = "avi"

    @property
    def kind(self) -> Kind:
        """Documents are parsed; audio is transcribed; video has its audio track transcribed."""
        if self in _AUDIO:
            return Kind.AUDIO
        if self in _VIDEO:
            return Kind.VIDEO
        return Kind.DOCUMENT


_AUDIO = frozenset({Format.MP3, Format.WAV, Format.M4A, Format.OGG, Format.FLAC})
# WebM may hold only audio; it is decoded the same way either way (first audio stream).
_VIDEO = frozenset({Format.WEBM, Format.MP4, Format.MOV, Format.AVI})

SUPPORTED = ", ".join(f.value for f in Format)

_DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
_PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
_XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"

# Declared media types (Content-Type of an upload or a fetched URL) and the formats that honestly fit each.
# Containers are lenient where clients commonly disagree (audio/mp4 for an .m4a, video/mp4 for audio only).
DECLARED: dict[str, frozenset[Format]] = {
    "application/pdf": frozenset({Format.PDF}),
    "application/x-pdf": frozenset({Format.PDF}),
    _DOCX: frozenset({Format.DOCX}),
    _PPTX: frozenset({Format.PPTX}),
    _XLSX: frozenset({Format.XLSX}),
    "application/vnd.oasis.opendocument.text": frozenset({Format.ODT}),
    "application/epub+zip": frozenset({Format.EPUB}),
    "message/rfc822": frozenset({Format.EML}),
    "text/html": frozenset({Format.HTML}),
    "application/xhtml+xml": frozenset({Format.HTML}),
    "text/markdown": frozenset({Format.MARKDOWN, Format.TEXT}),
    "text/x-markdown": frozenset({Format.MARKDOWN, Format.TEXT}),
    "text/plain": frozenset({Format.TEXT, Format.MARKDOWN}),
    "audio/mpeg": frozenset({Format.MP3}),
    "audio/mp3": frozenset({Format.MP3}),
    "audio/wav": frozenset({Format.WAV}),
    "audio/x-wav": frozenset({Format.WAV}),
    "audio/wave": frozenset({Format.WAV}),
    "audio/vnd.wave": frozenset({Format.WAV}),
    "audio/mp4": frozenset({Format.M4A, Format.MP4}),
    "audio/m4a": frozenset({Format.M4A, Format.MP4}),
    "audio/x-m4a": frozenset({Format.M4A, Format.MP4}),
    "audio/ogg": frozenset({Format.OGG}),
    "application/ogg": frozenset({Format.OGG}),
    "audio/flac": frozenset({Format.FLAC}),
    "audio/x-flac": frozenset({Format.FLAC}),
    "audio/webm": frozenset({Format.WEBM}),
    "video/webm": frozenset({Format.WEBM}),
    "video/mp4": frozenset({Format.MP4, Format.M4A}),
    "video/quicktime": frozenset({Format.MOV, Format.MP4}),
    "video/x-msvideo": frozenset({Format.AVI}),
    "video/avi": frozenset({Format.AVI}),
}

# Declared types that say nothing about the content: the bytes decide alone.
GENERIC = frozenset({"", "application/octet-stream", "binary/octet-stream", "application/unknown"})


def media_type(content_type: str | None) -> str:
    """`text/html; charset=utf-8` → `text/html` (lowercase, parameters dropped)."""
    return (content_type or "").split(";", 1)[0].strip().lower()
