"""Document parsers; they run inside a sandboxed child (see sandbox.py), one call per document or per group.

Heavy libraries are imported inside the functions: the parent process only needs this module's names
to hand them to the child, whose forkserver has already imported those libraries.
"""

from __future__ import annotations

from typing import Any

from charset_normalizer import from_bytes

from shared.errors import ExtractionFailed, MnemoflowError
from shared.ingest import answers, plaintext, wordprocessing
from shared.ingest.elements import Element, Extracted, TextBudget
from shared.ingest.formats import Format


def parse_document(path: str, fmt: Format, source_url: str | None, max_chars: int | None = None) -> Extracted:
    """Elements and metadata of one document; `ExtractionFailed` when it holds no text, or more than `max_chars`
    characters of it (the parser stops there)."""
    budget = TextBudget(max_chars)
    if fmt is Format.PDF:
        elements, metadata = _parse_pdf(path, budget)
    elif fmt is Format.HTML:
        elements, metadata = _parse_html(path, source_url, budget)
    elif fmt in (Format.TEXT, Format.MARKDOWN):
        elements = _parse_plain(path, fmt, budget)
        metadata = _summarise(elements)
    elif fmt is Format.DOCX:
        elements, properties = wordprocessing.partition_docx(path, budget)
        metadata = {**_summarise(elements), **properties}
    else:
        from shared.ingest import unstructured_setup

        # unstructured builds its whole element list first (held by the sandbox's memory cap); none of the text
        # past the limit is converted or sent back to the worker.
        elements = unstructured_setup.partition(path, fmt, budget)
        metadata = _summarise(elements)
    if not any(element.text.strip() for element in elements):
        raise ExtractionFailed(f"no text found in this {fmt.value} document", details={"format": fmt.value})
    return Extracted(format=fmt, elements=elements, metadata={"format": fmt.value, **metadata})


def parse_documents(paths: list[str], jobs: list[tuple[Format, int | None]]) -> list[dict[str, Any]]:
    """Several documents of one tenant in one child, in turn: each one's outcome as `answers.item` makes it.

    A document whose parser fails otherwise than with our own errors (a library's exception, a memory error) is
    left to be parsed again alone: in a child of its own its failure is told apart as one document's is.
    """
    outcomes: list[dict[str, Any]] = []
    for path, (fmt, max_chars) in zip(paths, jobs, strict=True):
        try:
            outcome: Extracted | MnemoflowError | None = parse_document(path, fmt, None, max_chars)
        except MnemoflowError as exc:
            outcome = exc
        except Exception:  # including MemoryError: what is left of the heap may not be this document's doing
            outcome = None
        outcomes.append(answers.item(outcome))
    return outcomes


def _parse_pdf(path: str, budget: TextBudget) -> tuple[list[Element], dict[str, Any]]:
    # PDFium's text layer per page: ~60x faster than unstructured's "fast" PDF strategy measured here,
    # and it needs no [pdf] extra (which brings torch). Layout analysis and OCR are out of scope.
    import pypdfium2 as pdfium

    try:
        pdf = pdfium.PdfDocument(path)
    except pdfium.PdfiumError as exc:
        raise ExtractionFailed(f"not a readable PDF ({exc})", details={"format": "pdf"}) from exc
    try:
        page_count = len(pdf)
        elements = []
        for index in range(page_count):
            page = pdf[index]
            textpage = page.get_textpage()
            text = textpage.get_text_bounded().replace("\r\n", "\n").replace("\r", "\n").strip()
            textpage.close()
            page.close()
            budget.take(len(text))  # page by page: the pages after the limit are never read
            if text:
                elements.append(Element(text=text, kind="Text", metadata={"page_number": index + 1}))
        info = {k.lower(): v for k, v in pdf.get_metadata_dict(skip_empty=True).items()}
    finally:
        pdf.close()
    if not elements:
        raise ExtractionFailed(
            f"this PDF has {page_count} page(s) but no extractable text (a scan or images only?); OCR is not supported",
            details={"format": "pdf", "page_count": page_count},
        )
    metadata: dict[str, Any] = {"page_count": page_count, "pages_with_text": len(elements)}
    metadata.update({k: info[k] for k in ("title", "author", "subject") if k in info})
    return elements, metadata


def _parse_html(path: str, source_url: str | None, budget: TextBudget) -> tuple[list[Element], dict[str, Any]]:
    # trafilatura keeps the main content (drops navigation, sidebars, footers) and renders it as Markdown,
    # whose headings, lists and tables unstructured turns into typed elements like any Markdown file.
    import trafilatura

    with open(path, "rb") as handle:
        html = handle.read()
    document = trafilatura.bare_extraction(
        html,
        url=source_url,
        with_metadata=True,
        include_tables=True,
        include_formatting=True,
        include_links=False,
        output_format="python",
        # Dates from the page's markup and metadata only: the extensive search through its text took 5 of a
        # typical page's 9 ms.
        date_extraction_params={"extensive_search": False, "original_date": True},
    )
    # A Document, since as_dict is left False (the dict in the return type is its deprecated form).
    assert not isinstance(document, dict)
    if document is None or not (document.text or "").strip():
        raise ExtractionFailed("no main content found in this HTML page", details={"format": "html"})
    budget.take(len(document.text or ""))
    elements = plaintext.partition_markdown(document.text or "")
    metadata = {
        key: value
        for key, value in {
            "title": document.title,
            "source_url": source_url or document.url,
            "author": document.author,
            "date": document.date,
            "sitename": document.sitename,
            "description": document.description,
            "language": document.language,
        }.items()
        if value
    }
    return elements, metadata


def _parse_plain(path: str, fmt: Format, budget: TextBudget) -> list[Element]:
    # The light path: decoding and a line parser (plaintext.py), no layout model and no spaCy.
    with open(path, "rb") as handle:
        raw = handle.read()
    text = raw.decode("utf-8-sig") if _is_utf8(raw) else str(from_bytes(raw).best() or raw.decode("latin-1"))
    if fmt is Format.MARKDOWN:
        return plaintext.partition_markdown(text, budget)
    return plaintext.partition_text(text, budget)


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _summarise(elements: list[Element]) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    pages = [e.metadata["page_number"] for e in elements if isinstance(e.metadata.get("page_number"), int)]
    if pages:
        metadata["page_count"] = max(pages)
    title = next((e.text for e in elements if e.kind == "Title"), None)
    if title:
        metadata["title"] = title
    first = elements[0].metadata if elements else {}
    for key in ("subject", "sent_from", "sent_to", "languages"):
        if first.get(key):
            metadata[key] = first[key]
    return metadata
