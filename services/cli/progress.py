"""Live progress bars of the `mnemoflow` commands that wait (rich, on stderr so stdout stays for results): items
done of a total, their rate and the time left, fed by the client's `wait(on_progress=...)`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from mnemoflow_client import DecayRun, JobPublic
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class RateColumn(ProgressColumn):
    """Items per second over the last half minute."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:,.0f}/s", style="progress.data.speed")


def bars(console: Console | None = None) -> Progress:
    """A Progress showing: what, a bar, done/total, rate, time elapsed and left, and a note (the job's status)."""
    return Progress(
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.fields[note]}"),
        console=console or Console(stderr=True),
    )


@contextmanager
def counter(description: str) -> Iterator[Callable[[int], None]]:
    """A spinner counting records (no total), gone when done; yields the callback that sets the count."""
    shown = Progress(
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        TextColumn("{task.completed:,.0f} records"),
        console=Console(stderr=True),
        transient=True,
    )
    with shown:
        task = shown.add_task(description, total=None)
        yield lambda count: shown.update(task, completed=count)


@contextmanager
def job_bar(description: str) -> Iterator[Callable[[JobPublic], None]]:
    """A bar for one job; yields the `on_progress` callback that moves it (a total of 0 shows an open bar)."""
    with bars() as progress:
        task = progress.add_task(description, total=None, note="")

        def moved(job: JobPublic) -> None:
            total = job.progress.get("total") or None
            progress.update(task, total=total, completed=job.progress.get("done", 0), note=job.status)

        yield moved


@contextmanager
def decay_bar() -> Iterator[Callable[[DecayRun], None]]:
    """A bar for a decay cycle: memories processed of those its plan walks (`planned`, known once it has started),
    with its tier and compression counts so far as the note."""
    with bars() as progress:
        task: TaskID = progress.add_task("decay", total=None, note="")

        def moved(run: DecayRun) -> None:
            counts = f"{run.status}: changed {run.changed:,}, compressed {run.compressed:,}"
            progress.update(task, total=run.planned or None, completed=run.processed, note=counts)

        yield moved
