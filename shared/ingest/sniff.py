"""Detect a document's format from its bytes alone: magic numbers, ZIP contents, then text heuristics.

Declared content types and file names are never trusted: they only get compared with what the bytes
say (`check_declared`), and a disagreement is refused rather than guessed around.
"""

from __future__ import annotations

import io
import os
import re
import zipfile
from collections.abc import Callable
from typing import BinaryIO

import filetype
from charset_normalizer import from_bytes

from shared.errors import UnsupportedMedia
from shared.ingest.formats import DECLARED, GENERIC, SUPPORTED, Format, media_type

HEAD_BYTES = 64 * 1024
# Gives a fresh binary stream over the whole input: a ZIP's directory sits at its end, past the head.
_Opener = Callable[[], BinaryIO]

# OOXML: the part each application's package must contain.
_OOXML_PARTS = {"word/document.xml": Format.DOCX, "ppt/presentation.xml": Format.PPTX, "xl/workbook.xml": Format.XLSX}
# ODF and EPUB packages name their type in a stored `mimetype` entry.
_PACKAGE_MIMETYPES = {
    "application/vnd.oasis.opendocument.text": Format.ODT,
    "application/epub+zip": Format.EPUB,
}
_MP4_AUDIO_BRANDS = {"M4A ", "M4B ", "M4P "}
_QUICKTIME_ATOMS = {b"moov", b"mdat", b"wide", b"free", b"skip", b"pnot"}

_HTML_START = re.compile(
    rb"^\s*(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|head|body)\b", re.I | re.S
)
_HTML_TAG = re.compile(r"</?(?:html|head|body|div|p|span|a|h[1-6]|ul|ol|li|table|tr|td|br|article|section|nav)\b", re.I)
_EMAIL_HEADER = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):[ \t]", re.M)
_EMAIL_HEADERS = {"from", "to", "cc", "subject", "date", "message-id", "mime-version", "received", "return-path"}
# Markdown constructs plain text rarely has (strong) and ones it sometimes has (weak: need two kinds).
_MD_STRONG = (
    re.compile(r"^#{1,6}[ \t]+\S", re.M),
    re.compile(r"^(?:```|~~~)", re.M),
    re.compile(r"\[[^\]\n]+\]\([^)\s]+\)"),
    re.compile(r"^\|?[ \t]*:?-{3,}:?[ \t]*\|", re.M),
)
_MD_WEAK = (
    re.compile(r"^[ \t]*[-*+][ \t]+\S", re.M),
    re.compile(r"^[ \t]*\d+\.[ \t]+\S", re.M),
    re.compile(r"^>[ \t]?\S", re.M),
    re.compile(r"(\*\*|__)\S.*?\S\1"),
    re.compile(r"`[^`\n]+`"),
    re.compile(r"^(?:=+|-+)[ \t]*$", re.M),
)


def sniff(source: bytes | str | os.PathLike[str]) -> Format:
    """The format of a file (path) or of bytes in memory; `UnsupportedMedia` naming what was found otherwise."""
    if isinstance(source, bytes):
        return _sniff(source[:HEAD_BYTES], lambda: io.BytesIO(source))
    with open(source, "rb") as handle:
        head = handle.read(HEAD_BYTES)
    return _sniff(head, lambda: open(source, "rb"))


def check_declared(detected: Format, declared_type: str | None) -> None:
    """Refuse content whose declared media type names a different format than its bytes (mislabelled)."""
    declared = media_type(declared_type)
    if declared in GENERIC:
        return
    fits = DECLARED.get(declared)
    if fits is None and declared.startswith("text/") and detected in (Format.TEXT, Format.MARKDOWN):
        return  # text/csv, text/x-log, …: plain text with another name, read as text
    if fits is None or detected not in fits:
        raise UnsupportedMedia(
            f"declared as {declared} but the content is {detected.value}; declare its real type or send it without one",
            details={"declared": declared, "detected": detected.value},
        )


def _sniff(head: bytes, reopen: _Opener) -> Format:
    binary = _binary_format(head, reopen)
    if binary is not None:
        return binary
    text = _decode_text(head)
    if text is None:
        raise _unsupported(_describe(head))
    return _text_format(head, text)


def _binary_format(head: bytes, reopen: _Opener) -> Format | None:
    if head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"%PDF-"):
        return Format.PDF
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return _zip_format(reopen)
    if head.startswith(b"RIFF") and len(head) >= 12:
        riff = {b"WAVE": Format.WAV, b"AVI ": Format.AVI}.get(head[8:12])
        if riff is None:
            raise _unsupported(f"a RIFF container of type {head[8:12]!r}")
        return riff
    if head.startswith(b"OggS"):
        return Format.OGG
    if head.startswith(b"fLaC"):
        return Format.FLAC
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        if b"\x42\x82\x84webm" in head[:4096]:
            return Format.WEBM
        raise _unsupported("a Matroska (mkv) container")
    if head[4:8] == b"ftyp":
        brand = head[8:12].decode("latin-1")
        if brand in _MP4_AUDIO_BRANDS:
            return Format.M4A
        return Format.MOV if brand == "qt  " else Format.MP4
    if head[:1] == b"\x00" and head[4:8] in _QUICKTIME_ATOMS:  # an atom size starts with a zero byte, text never
        return Format.MOV
    return _mp3_format(head)


def _mp3_format(head: bytes) -> Format | None:
    if head.startswith(b"ID3") and len(head) >= 10:
        # ID3v2 size is four 7-bit bytes ("syncsafe"), after a 10-byte header; another codec may follow it.
        size = (head[6] << 21) | (head[7] << 14) | (head[8] << 7) | head[9]
        offset = 10 + size
        # An ID3 tag marks an audio file; it is an MP3 unless a FLAC stream follows the tag.
        return Format.FLAC if head[offset : offset + 4] == b"fLaC" else Format.MP3
    frame = head[:2]
    # MPEG audio frame sync (11 set bits), a version that is not "reserved" (01) and layer III (01): layers
    # I/II are not mp3, and excluding them keeps a UTF-16 byte-order mark (FF FE) from passing for a frame.
    if len(frame) == 2 and frame[0] == 0xFF and frame[1] & 0xE0 == 0xE0 and frame[1] & 0x18 != 0x08:
        return Format.MP3 if frame[1] & 0x06 == 0x02 else None
    return None


def _zip_format(reopen: _Opener) -> Format:
    try:
        with reopen() as stream, zipfile.ZipFile(stream) as archive:
            names = set(archive.namelist())
            if "mimetype" in names:
                with archive.open("mimetype") as entry:
                    # A few bytes suffice; never inflate more of an untrusted member than that.
                    declared = entry.read(100).decode("ascii", "replace").strip()
                if declared in _PACKAGE_MIMETYPES:
                    return _PACKAGE_MIMETYPES[declared]
                raise _unsupported(f"a ZIP package of type {declared}")
    except zipfile.BadZipFile as exc:
        raise _unsupported(f"a damaged ZIP archive ({exc})") from exc
    if "[Content_Types].xml" in names:
        for part, fmt in _OOXML_PARTS.items():
            if part in names:
                return fmt
        raise _unsupported("an Office Open XML package that is not Word, PowerPoint or Excel")
    raise _unsupported("a ZIP archive")


def _decode_text(head: bytes) -> str | None:
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return head.decode("utf-16", "replace")
    if b"\x00" in head:
        return None
    try:
        return head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start >= len(head) - 4:  # a multi-byte character cut by the read limit
            return head[: exc.start].decode("utf-8")
    best = from_bytes(head).best()
    return None if best is None else str(best)


def _text_format(head: bytes, text: str) -> Format:
    if _HTML_START.match(head.lstrip(b"\xef\xbb\xbf")) or (
        text.lstrip().startswith("<") and len(_HTML_TAG.findall(text[:8192])) >= 3
    ):
        return Format.HTML
    if _is_email(text):
        return Format.EML
    if any(pattern.search(text) for pattern in _MD_STRONG) or sum(bool(p.search(text)) for p in _MD_WEAK) >= 2:
        return Format.MARKDOWN
    if not text.strip():
        raise _unsupported("empty or whitespace-only text")
    return Format.TEXT


def _is_email(text: str) -> bool:
    header_block = text.lstrip("\ufeff").split("\n\n", 1)[0].replace("\r\n", "\n")
    if not _EMAIL_HEADER.match(header_block):
        return False
    names = {m.group(1).lower() for m in _EMAIL_HEADER.finditer(header_block)}
    return "from" in names and len(names & _EMAIL_HEADERS) >= 3


def _describe(head: bytes) -> str:
    kind = filetype.guess(head)
    if kind is None:
        return "binary data of an unknown format"
    return f"{kind.mime} (.{kind.extension})"


def _unsupported(found: str) -> UnsupportedMedia:
    return UnsupportedMedia(
        f"unsupported content: detected {found}; supported formats: {SUPPORTED}",
        details={"detected": found, "supported": SUPPORTED.split(", ")},
    )
