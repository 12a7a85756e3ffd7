"""Parsers run in a child under time and memory limits: a bad file fails alone, the caller lives on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shared.errors import ExtractionFailed, InvalidInput
from shared.ingest import Format, Limits, extract
from shared.ingest.sandbox import GIB, run_limited
from tests.unit.ingest import helpers, samples

MIB = 1024 * 1024


def test_results_come_back_from_a_separate_process() -> None:
    assert run_limited("test", Limits(), helpers.allocate, 10) == 10
    assert run_limited("test", Limits(), helpers.child_pid) != os.getpid()


def test_the_memory_cap_turns_a_runaway_allocation_into_a_clear_error() -> None:
    baseline = run_limited("test", Limits(), helpers.vm_size_bytes)
    limits = Limits(memory_bytes=baseline + 200 * MIB)
    with pytest.raises(ExtractionFailed, match="exceeded the memory limit") as caught:
        run_limited("big document", limits, helpers.allocate, 1024)
    assert caught.value.message.startswith("big document: ")
    assert caught.value.details["limit"] == "memory"
    # The same limits let a modest parse through: the cap is on the child, not a leftover in this process.
    assert run_limited("test", limits, helpers.allocate, 50) == 50


def test_the_time_limit_stops_the_child() -> None:
    with pytest.raises(ExtractionFailed, match=r"took longer than the 0.5 s limit") as caught:
        run_limited("slow document", Limits(timeout_s=0.5), helpers.sleep, 30)
    assert caught.value.details == {"limit": "time", "timeout_s": 0.5}


def test_a_crashing_parser_is_reported_not_fatal() -> None:
    with pytest.raises(ExtractionFailed, match="the parser crashed \\(signal SIGSEGV\\)"):
        run_limited("odd document", Limits(), helpers.segfault)


def test_domain_errors_from_the_child_keep_their_class_and_details() -> None:
    with pytest.raises(ExtractionFailed, match="odd document: this document is refused") as caught:
        run_limited("odd document", Limits(), helpers.refuse)
    assert caught.value.details["why"] == "test"


def test_limits_must_be_positive() -> None:
    with pytest.raises(InvalidInput):
        Limits(timeout_s=0)


def test_a_docx_zip_bomb_hits_the_memory_cap(tmp_path: Path) -> None:
    bomb = samples.zip_bomb_docx(tmp_path / "bomb.docx", megabytes=150)
    assert bomb.stat().st_size < 2 * MIB
    with pytest.raises(ExtractionFailed, match=r"docx document: .*memory limit of 1\.2 GiB") as caught:
        extract(bomb, Format.DOCX, limits=Limits(timeout_s=60, memory_bytes=int(1.25 * GIB)))
    assert caught.value.details["limit"] == "memory"


def test_a_docx_zip_bomb_hits_the_time_limit_when_memory_allows(tmp_path: Path) -> None:
    bomb = samples.zip_bomb_docx(tmp_path / "bomb.docx", megabytes=150)
    with pytest.raises(ExtractionFailed, match="docx document: parsing took longer than the 1 s limit"):
        extract(bomb, Format.DOCX, limits=Limits(timeout_s=1, memory_bytes=8 * GIB))
