"""The benchmarks' stack starts measuring only once its processes have finished starting up."""

from __future__ import annotations

import subprocess
import sys

import psutil

from bench.common import wait_settled

# Busy for `busy` seconds in a child of its own (as a worker's pool processes are), then idle.
_SCRIPT = """
import multiprocessing, sys, time
def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
if __name__ == "__main__":
    child = multiprocessing.Process(target=spin, args=(float(sys.argv[1]),))
    child.start()
    child.join()
    time.sleep(60)
"""


def _start(busy: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", _SCRIPT, str(busy)])


def test_waits_for_a_grandchild_to_stop_working():
    # Whole-second intervals: a process starved of CPU by a loaded machine looks idle over a short one (this test
    # failed once at a load average of 6 with 0.25 s), and must look idle over a second to be taken as settled.
    proc = _start(busy=3.0)
    try:
        waited = wait_settled([proc], interval=1.0, timeout=60)
        assert waited >= 3.0  # not settled while the child spun
        assert not psutil.Process(proc.pid).children()  # the busy child is done: it was waited for
    finally:
        proc.kill()
        proc.wait()


def test_an_idle_stack_is_settled(capsys):
    proc = _start(busy=0.0)
    try:
        wait_settled([proc], interval=0.25, timeout=30)  # the interpreter's own start-up, then quiet
        wait_settled([proc], interval=0.25, timeout=5)
        assert "still busy" not in capsys.readouterr().out
    finally:
        proc.kill()
        proc.wait()


def test_the_report_rewrites_the_sections_it_ran_and_keeps_the_others():
    from datetime import UTC, datetime

    from bench import report

    by_name = {b.name: b for b in report.BENCHMARKS}
    quality, ingest = by_name["quality"], by_name["ingest"]
    when = datetime(2026, 11, 24, tzinfo=UTC)
    first = report.page(
        {
            ingest.title: report.section(ingest, "ingest: 1,000/s", 60.0, 0, when),
            quality.title: report.section(quality, "R@5 0.7", 600.0, 0, when),
        },
        "",
    )
    assert first.index(quality.title) < first.index(ingest.title)  # the benchmarks' order, not the run's
    second = report.page({ingest.title: report.section(ingest, "ingest: 2,000/s", 60.0, 1, when)}, first)
    assert "R@5 0.7" in second and "ingest: 2,000/s" in second and "1,000/s" not in second
    assert "failed (exit code 1)" in second and second.count("## ") == 2
    assert "(10 min; 2026-11-24" in second  # each section says when it was measured


def test_the_report_takes_a_section_from_a_saved_output(tmp_path, monkeypatch):
    import sys

    from bench import report

    saved = tmp_path / "aging.txt"
    saved.write_text("RuntimeDirWarning: noise\n| 30 days | 0.700 |\n")
    page = tmp_path / "benchmarks.md"
    monkeypatch.setattr(
        sys, "argv", ["bench.report", "--only", "aging", "--saved", f"aging={saved}", "--output", str(page)]
    )
    report.main()  # runs nothing: the only benchmark chosen is the saved one
    text = page.read_text()
    assert "## Recall after time passes" in text and "| 30 days | 0.700 |" in text and "noise" not in text
