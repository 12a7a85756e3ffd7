"""The optional extras (`mnemoflow[documents]`, `mnemoflow[audio]`): which formats need which, and what a process
without one does: the gateway's intake refuses the format with 415, the worker's extraction fails the document,
both naming the `pip install` that fixes it; plain text, Markdown, HTML and PDF keep working without either.

An install without an extra is simulated in a subprocess that cannot import the extra's modules
(tests/without_extras/sitecustomize.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shared.ingest import Format
from shared.ingest.extras import MODULES, Extra, extra_for, install_command, installed
from tests.unit.ingest import samples

ROOT = Path(__file__).resolve().parents[3]
AUDIO = ",".join(MODULES[Extra.AUDIO])
DOCUMENTS = ",".join(MODULES[Extra.DOCUMENTS])


def without(blocked: str, code: str, *args: str) -> dict:
    """Run `code` (which prints one JSON line last) in a Python that cannot import the modules `blocked` names."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "tests" / "without_extras"),
        "MNEMOFLOW_TEST_BLOCKED_MODULES": blocked,
    }
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


REFUSAL = """
    import json, sys
    from shared.errors import MnemoflowError
    from shared.ingest import Format
    from shared.ingest.intake import check_format
    out = {}
    for name in sys.argv[1:]:
        try:
            check_format(Format(name), None)
            out[name] = None
        except MnemoflowError as exc:
            out[name] = {"status": exc.status_code, "message": exc.message, "details": exc.details}
    print(json.dumps(out))
"""


def test_each_format_names_the_extra_its_parser_comes_from() -> None:
    assert {f for f in Format if extra_for(f) is Extra.AUDIO} == {f for f in Format if f.kind.value != "document"}
    assert {f for f in Format if extra_for(f) is Extra.DOCUMENTS} == {
        Format.PPTX, Format.XLSX, Format.ODT, Format.EPUB, Format.EML,
    }  # fmt: skip
    assert {f for f in Format if extra_for(f) is None} == {
        Format.PDF, Format.HTML, Format.DOCX, Format.MARKDOWN, Format.TEXT,
    }  # fmt: skip
    assert install_command(Extra.AUDIO) == "pip install 'mnemoflow[audio]'"


def test_the_test_install_has_every_extra() -> None:
    assert installed(Extra.AUDIO) and installed(Extra.DOCUMENTS)  # `.[dev]` includes both


def test_without_the_audio_extra_the_gateway_refuses_audio_and_video_with_415_naming_it() -> None:
    out = without(AUDIO, REFUSAL, "wav", "mp4", "docx", "pdf", "md")
    for name in ("wav", "mp4"):
        assert out[name]["status"] == 415
        assert "pip install 'mnemoflow[audio]'" in out[name]["message"]
        assert out[name]["details"]["extra"] == "audio"
        assert set(out[name]["details"]["missing"]) == set(MODULES[Extra.AUDIO])
    assert out["docx"] is None and out["pdf"] is None and out["md"] is None


def test_without_the_documents_extra_office_formats_are_refused_and_the_base_formats_pass() -> None:
    out = without(DOCUMENTS, REFUSAL, "docx", "pptx", "xlsx", "odt", "epub", "eml", "pdf", "html", "md", "txt", "wav")
    for name in ("pptx", "xlsx", "odt", "epub", "eml"):
        assert out[name]["status"] == 415
        assert "pip install 'mnemoflow[documents]'" in out[name]["message"], out[name]
    assert [out[name] for name in ("docx", "pdf", "html", "md", "txt", "wav")] == [None] * 6


def test_one_missing_module_is_enough_to_name_the_extra() -> None:
    out = without("pypandoc", REFUSAL, "epub", "pptx")
    assert out["epub"]["details"]["missing"] == ["pypandoc"]
    assert out["pptx"]["status"] == 415  # the extra is installed whole or not at all


def test_a_worker_without_the_audio_extra_fails_the_document_naming_it(tmp_path: Path) -> None:
    wav = samples.tone_wav(tmp_path / "tone.wav", seconds=0.5)
    out = without(
        AUDIO,
        """
        import json, sys
        from shared.errors import MnemoflowError
        from shared.ingest import Format, extract
        from shared.ingest.outcome import is_final
        try:
            extract(sys.argv[1], Format.WAV)
            print(json.dumps(None))
        except MnemoflowError as exc:
            print(json.dumps({"status": exc.status_code, "message": exc.message, "final": is_final(exc)}))
        """,
        str(wav),
    )
    assert out["status"] == 415 and out["final"]  # the document fails at once: a retry cannot install anything
    assert "pip install 'mnemoflow[audio]'" in out["message"]


@pytest.mark.parametrize(
    ("fmt", "content", "expected"),
    [
        ("md", samples.MARKDOWN, [("Title", "Field Guide"), ("NarrativeText", None), ("Title", "Identification")]),
        ("txt", samples.PLAIN_TEXT, [("NarrativeText", "Notes from the marsh walk.")]),
        ("html", samples.ARTICLE_HTML, [("Title", "The Heron Migration"), ("NarrativeText", None)]),
    ],
)
def test_text_markdown_and_html_are_parsed_without_the_documents_extra(
    tmp_path: Path, fmt: str, content: str, expected: list[tuple[str, str | None]]
) -> None:
    path = tmp_path / f"doc.{fmt}"
    path.write_text(content)
    out = without(
        DOCUMENTS,
        """
        import json, sys
        from shared.ingest import Format
        from shared.ingest.parsers import parse_document
        extracted = parse_document(sys.argv[1], Format(sys.argv[2]), "https://birds.example/herons")
        print(json.dumps({
            "elements": [[e.kind, e.text] for e in extracted.elements],
            "unstructured": "unstructured" in sys.modules,
        }))
        """,
        str(path),
        fmt,
    )
    assert not out["unstructured"]
    for (kind, text), (want_kind, want_text) in zip(out["elements"], expected, strict=False):
        assert kind == want_kind
        assert want_text is None or text == want_text
    if fmt == "html":
        assert ["ListItem", "Eggs are laid in March."] in out["elements"]
        assert not any("All rights reserved" in text for _, text in out["elements"])
