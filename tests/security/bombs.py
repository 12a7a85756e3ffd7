"""Decompression and expansion bombs, generated on the spot and small on disk: one per container format.

Zip bombs keep a valid package and swap one member for a huge, highly compressible one (deflate's ~1000:1, so a
few hundred KiB on disk); PDFs are written by hand around a huge Flate stream or a deeply nested object; the
XML ones are the billion laughs (ten entities of ten) and external entities (XXE) pointing at a file and a URL.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from pathlib import Path

from tests.unit.ingest import samples

MIB = 1024 * 1024

LAUGHS_DTD = '<!ENTITY lol "lol">' + "".join(
    f'<!ENTITY lol{n} "{f"&lol{n - 1};" * 10 if n > 1 else "&lol;" * 10}">' for n in range(1, 10)
)
LAUGHS = "&lol9;"  # 10^9 "lol" if expanded: 3 GB


def _repack(source: Path, target: Path, member: str, parts: list[bytes], repeat_index: int, repeat: int) -> Path:
    """`source`'s package with `member` replaced by `parts`, the part at `repeat_index` written `repeat` times."""
    original = zipfile.ZipFile(source)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as out:
        for item in original.infolist():
            if item.filename != member:
                # EPUB and ODT want "mimetype" first and stored; keep each member's own compression.
                out.writestr(item, original.read(item.filename), compress_type=item.compress_type)
                continue
            replaced = zipfile.ZipInfo(member, item.date_time)
            replaced.compress_type = zipfile.ZIP_DEFLATED
            # No ZIP64 (pandoc cannot read it): members stay under 2 GiB.
            with out.open(replaced, "w") as body:
                for index, part in enumerate(parts):
                    for _ in range(repeat if index == repeat_index else 1):
                        body.write(part)
    original.close()
    return target


def _block(piece: bytes, size: int = MIB) -> bytes:
    return piece * (size // len(piece))


def docx_zip_bomb(path: Path, megabytes: int) -> Path:
    """A DOCX whose body is `megabytes` MiB of paragraphs."""
    return samples.zip_bomb_docx(path, megabytes)


def xlsx_zip_bomb(path: Path, megabytes: int) -> Path:
    """An XLSX whose first sheet holds one cell of `megabytes` MiB of text."""
    base = samples.xlsx_file(path.with_suffix(".base.xlsx"))
    head = (
        b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
        b'<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>'
        b'<row r="1"><c r="A1" t="inlineStr"><is><t>'
    )
    tail = b"</t></is></c></row></sheetData></worksheet>"
    return _repack(base, path, "xl/worksheets/sheet1.xml", [head, _block(b"bomb "), tail], 1, megabytes)


def epub_zip_bomb(path: Path, megabytes: int) -> Path:
    """An EPUB whose chapter is `megabytes` MiB of paragraphs."""
    base = samples.pandoc_file(path.with_suffix(".base.epub"), "epub")
    chapter = "EPUB/text/ch001.xhtml"
    head = zipfile.ZipFile(base).read(chapter).split(b"<body", 1)[0] + b"<body>"
    return _repack(base, path, chapter, [head, _block(b"<p>bomb bomb bomb</p>\n"), b"</body></html>"], 1, megabytes)


def odt_zip_bomb(path: Path, megabytes: int) -> Path:
    """An ODT whose text is `megabytes` MiB of paragraphs."""
    base = samples.pandoc_file(path.with_suffix(".base.odt"), "odt")
    content = zipfile.ZipFile(base).read("content.xml")
    head, rest = content.split(b"<office:text>", 1)
    tail = b"</office:text>" + rest.split(b"</office:text>", 1)[1]
    parts = [head + b"<office:text>", _block(b"<text:p>bomb bomb bomb</text:p>"), tail]
    return _repack(base, path, "content.xml", parts, 1, megabytes)


def _pdf(objects: list[bytes]) -> bytes:
    """A PDF of `objects` (numbered from 1; the first is the catalog), with its cross-reference table."""
    out = io.BytesIO()
    out.write(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def _page_pdf(content: bytes, extra: bytes = b"") -> bytes:
    return _pdf(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
            b"/Resources << /Font << /F1 5 0 R >> >> " + extra + b">>",
            content,
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        ]
    )


def pdf_stream_bomb(path: Path, megabytes: int) -> Path:
    """A one-page PDF whose content stream inflates to `megabytes` MiB of text-showing operators."""
    compressor = zlib.compressobj(9)
    block = _block(b"(bomb) Tj ")
    compressed = compressor.compress(b"BT /F1 12 Tf 72 720 Td ")
    for _ in range(megabytes):
        compressed += compressor.compress(block)
    compressed += compressor.compress(b"ET") + compressor.flush()
    stream = b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(compressed) + compressed + b"\nendstream"
    path.write_bytes(_page_pdf(stream))
    return path


def pdf_nested(path: Path, depth: int) -> Path:
    """A PDF with some text, whose page carries an array nested `depth` deep (and its content stream another)."""
    nested = b"[" * depth + b"]" * depth
    text = b"BT /F1 12 Tf 72 720 Td (Nested arrays ahead.) Tj ET " + nested
    stream = b"<< /Length %d >>\nstream\n" % len(text) + text + b"\nendstream"
    path.write_bytes(_page_pdf(stream, extra=b"/Nested " + nested + b" "))
    return path


def _doctype(root: str, entities: str) -> bytes:
    return f"<!DOCTYPE {root} [{entities}]>".encode()


def docx_with_entities(path: Path, entities: str, reference: str) -> Path:
    """A DOCX whose document.xml declares `entities` and says `reference` in a paragraph."""
    base = samples.docx_file(path.with_suffix(".base.docx"), sections=1)
    xml = zipfile.ZipFile(base).read("word/document.xml")
    declaration, rest = xml.split(b"?>", 1)
    rest = rest.replace(b"Section 1</w:t>", f"Section 1 {reference}</w:t>".encode(), 1)
    doctype = _doctype("w:document", entities)
    return _repack(base, path, "word/document.xml", [declaration + b"?>" + doctype + rest], 0, 1)


def odt_with_entities(path: Path, entities: str, reference: str) -> Path:
    """An ODT whose content.xml declares `entities` and says `reference` in a paragraph."""
    base = samples.pandoc_file(path.with_suffix(".base.odt"), "odt")
    xml = zipfile.ZipFile(base).read("content.xml")
    declaration, rest = xml.split(b"?>", 1)
    rest = rest.replace(b"<office:text>", f"<office:text><text:p>Entities {reference}</text:p>".encode(), 1)
    doctype = _doctype("office:document-content", entities)
    return _repack(base, path, "content.xml", [declaration + b"?>" + doctype + rest], 0, 1)


def epub_with_entities(path: Path, entities: str, reference: str) -> Path:
    """An EPUB whose chapter declares `entities` and says `reference` in a paragraph."""
    base = samples.pandoc_file(path.with_suffix(".base.epub"), "epub")
    chapter = "EPUB/text/ch001.xhtml"
    xml = zipfile.ZipFile(base).read(chapter).replace(b"<!DOCTYPE html>", _doctype("html", entities), 1)
    xml = xml.replace(b"<h1>", f"<p>Entities {reference}</p><h1>".encode(), 1)
    return _repack(base, path, chapter, [xml], 0, 1)


def html_with_entities(path: Path, entities: str, reference: str) -> Path:
    """An HTML page (the sample article) that declares `entities` and uses `reference` in its article."""
    page = samples.ARTICLE_HTML.replace("<!DOCTYPE html>", f"<!DOCTYPE html [{entities}]>", 1)
    path.write_text(page.replace("<h1>", f"<p>Entities {reference}</p><h1>", 1))
    return path


def xml_with_entities(path: Path, entities: str, reference: str) -> Path:
    """A plain XML file that declares `entities` and uses `reference` (ingested as what its bytes say it is)."""
    notes = "<note>The heron colony grows every spring near the old mill.</note>\n" * 3
    head = f'<?xml version="1.0"?>\n<!DOCTYPE notes [{entities}]>\n'
    path.write_text(f"{head}<notes><note>Entities {reference}</note>\n{notes}</notes>\n")
    return path
