"""Imported once by the parser sandbox's forkserver (sandbox.py): the light parsers' first call, made there.

A parser's first call in a process pays for what its library sets up lazily (trafilatura's and lxml's compiled
expressions, python-docx's default styles, PDFium's fonts); made here, in the forkserver, every child forked from
it starts with that done instead of paying it for its first document. The samples are ours, not a tenant's.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

from shared.errors import MnemoflowError
from shared.ingest.formats import Format
from shared.ingest.parsers import parse_document

_HTML = (
    "<html><head><title>Warm-up</title><meta name='author' content='Mnemoflow'></head><body><article>"
    "<h1>Warm-up</h1><p>This paragraph warms up the main-content extraction of every child.</p>"
    "<ul><li>one item</li></ul><table><tr><td>a</td><td>b</td></tr></table></article></body></html>"
)
_MARKDOWN = "# Warm-up\n\nA paragraph.\n\n- an item\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n"


def warm_up() -> None:
    import docx
    import pypdfium2 as pdfium

    with tempfile.TemporaryDirectory(prefix="mnemoflow-warm-up-") as tmp:
        root = Path(tmp)
        (root / "page.html").write_text(_HTML)
        (root / "notes.md").write_text(_MARKDOWN)
        (root / "notes.txt").write_text("A line of plain text.\n\nAnother paragraph.\n")
        document = docx.Document()
        document.add_heading("Warm-up", level=1)
        document.add_paragraph("A paragraph.")
        document.add_table(rows=1, cols=2).cell(0, 0).text = "a"
        document.save(str(root / "report.docx"))
        pdf = pdfium.PdfDocument.new()
        pdf.new_page(200, 200)
        pdf.save(str(root / "blank.pdf"))
        pdf.close()
        for name, fmt in (
            ("page.html", Format.HTML),
            ("notes.md", Format.MARKDOWN),
            ("notes.txt", Format.TEXT),
            ("report.docx", Format.DOCX),
            ("blank.pdf", Format.PDF),
        ):
            with contextlib.suppress(MnemoflowError):  # the blank PDF has no text: refused, after PDFium loaded it
                parse_document(str(root / name), fmt, None)


# An optimisation only: the forkserver must start whatever this meets (a failure here would take it down, and with
# it every parse); the children then pay the first call themselves.
with contextlib.suppress(Exception):
    warm_up()
