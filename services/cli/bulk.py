"""`mnemoflow batch FILE`: a bulk load from JSONL or CSV through `POST /memory/batch`, with one progress bar.

The file is read twice, a record at a time: once to check every record (nothing is sent when one is bad, unless
--skip-invalid) and count them, then to send them in batches, several in flight, each with an idempotency key made
from its place and content (`records.batch_key`), so that a load run again after a crash sends the same batches
under the same keys and the gateway stores nothing twice. The bar counts items the workers have stored, from the
jobs' progress (`/jobs/{id}`), as the client's `JobGroup` follows them.
"""

from __future__ import annotations

import math
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Annotated

import typer
from mnemoflow_client import BatchAccepted, JobGroup, Mnemoflow
from rich.progress import Progress, TaskID

from services.cli import progress, records
from services.cli.commands import User, connect

POLL_SECONDS = 0.5  # how often the jobs are asked about
SHOWN_BAD = 10  # bad records listed before "and N more"


def batch(
    file: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="A .jsonl or .csv file of memories")
    ],
    user: User = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", "-t", help="A tag for every item (repeatable)")] = None,
    file_format: Annotated[str | None, typer.Option("--format", help="jsonl or csv [from the file's suffix]")] = None,
    batch_size: Annotated[
        int, typer.Option(min=1, max=50_000, help="Items per POST /memory/batch (the gateway takes up to 50,000)")
    ] = 1000,
    parallel: Annotated[int, typer.Option(min=1, max=32, help="Batches in flight at once")] = 4,
    sequence: Annotated[
        bool,
        typer.Option(
            help="The items are a conversation in order: each is linked to the next (within a batch of --batch-size)"
        ),
    ] = False,
    skip_invalid: Annotated[
        bool, typer.Option(help="Leave out bad records (listed) and load the rest, instead of sending nothing")
    ] = False,
    wait_: Annotated[bool, typer.Option("--wait/--no-wait", help="Follow the jobs until every item is stored")] = True,
) -> None:
    """Load many memories from a JSONL or CSV file, with a progress bar (items stored, rate, time left).

    JSONL: one object per line with a memory's fields: `content` (required), `tags`, `metadata`, `occurred_at`,
    `salience`, `confidence`. CSV: a header row with a `content` column; `tags` are separated by commas or
    semicolons, `metadata` is a JSON object, any other column goes into the metadata under its name.

    Every record is checked first: a bad one is reported with its line number and nothing is sent (or, with
    --skip-invalid, it is left out). Running the same load again stores nothing twice. Examples:

        mnemoflow batch notes.jsonl --user alice --tag import-2024

        mnemoflow batch turns.csv --sequence --batch-size 500

    A line of notes.jsonl: {"content": "Noa booked the ferry", "tags": ["trip"], "occurred_at": "2023-05-08"}
    """
    try:
        fmt = records.file_format(file, file_format)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--format") from exc
    defaults = records.Defaults(tags=tuple(tag or ()), user_id=user)
    checked = _check(file, fmt, defaults, skip_invalid)
    with connect(user) as client, progress.bars() as bars:
        task = bars.add_task(f"batch {file.name}", total=checked.items, note="")
        started = time.perf_counter()
        group, existing = _send(client, file, fmt, defaults, batch_size, parallel, sequence, wait_, (bars, task))
    _summarise(file, checked, group, existing, time.perf_counter() - started, waited=wait_)


def _check(file: Path, fmt: records.Format, defaults: records.Defaults, skip_invalid: bool) -> records.Checked:
    """Every record read once: the count, and the bad ones reported (the end, unless --skip-invalid)."""
    try:
        with progress.counter(f"checking {file.name}") as seen:
            checked = records.check(file, fmt, defaults, seen=seen)
    except records.BadRecord as exc:  # the CSV header
        typer.echo(f"error: {file.name} {exc}", err=True)
        raise typer.Exit(1) from exc
    except UnicodeDecodeError as exc:
        typer.echo(f"error: {file.name} is not UTF-8 text ({exc.reason} at byte {exc.start:,})", err=True)
        raise typer.Exit(1) from exc
    for bad in checked.bad[:SHOWN_BAD]:
        typer.echo(f"{'warning' if skip_invalid else 'error'}: {file.name} {bad}", err=True)
    if checked.bad_count > SHOWN_BAD:
        typer.echo(f"... and {checked.bad_count - SHOWN_BAD:,} more bad records", err=True)
    if checked.bad_count and not skip_invalid:
        typer.echo(
            f"error: {_plural(checked.bad_count, 'bad record')} in {file.name}; nothing was sent. Fix them, or pass "
            "--skip-invalid to load the other records",
            err=True,
        )
        raise typer.Exit(1)
    if not checked.items:
        typer.echo(f"error: no items in {file.name}", err=True)
        raise typer.Exit(1)
    return checked


def _send(
    client: Mnemoflow,
    file: Path,
    fmt: records.Format,
    defaults: records.Defaults,
    size: int,
    parallel: int,
    sequence: bool,
    follow: bool,
    bar: tuple[Progress, TaskID],
) -> tuple[JobGroup, set[uuid.UUID]]:
    """Send the file's batches, `parallel` in flight, and follow their jobs until all have ended (when `follow`;
    else the bar counts items sent); the jobs, and those that were already there (sent by an earlier run)."""
    bars, task = bar
    group = JobGroup(user_id=client.settings.user_id)
    stream = enumerate(records.batches(records.items(file, fmt, defaults), size))
    expected = math.ceil((bars.tasks[task].total or 0) / size)
    pending: dict[Future[BatchAccepted], int] = {}
    existing: set[uuid.UUID] = set()
    sent, exhausted, polled = 0, False, 0.0
    pool = ThreadPoolExecutor(parallel, thread_name_prefix="mnemoflow-batch")
    try:
        while True:
            while not exhausted and len(pending) < parallel:
                position, items = next(stream, (-1, []))
                if position < 0:
                    exhausted = True
                    break
                key = records.batch_key(position, items, sequence=sequence)
                pending[pool.submit(client.batch, items, sequence=sequence, idempotency_key=key)] = len(items)
            done = wait(pending, timeout=POLL_SECONDS, return_when=FIRST_COMPLETED).done if pending else set()
            for future in done:
                count = pending.pop(future)
                accepted = future.result()  # an error answer ends the load (connect() prints it)
                group.add(accepted, total=count)
                if accepted.status == "existing":
                    existing.add(accepted.job_id)
                sent += count
            if follow and group.unfinished() and time.monotonic() - polled >= POLL_SECONDS:
                client.poll(group)
                polled = time.monotonic()
            note = f"{len(group):,}/{expected:,} batches sent" + (f", {len(existing):,} already" if existing else "")
            bars.update(task, completed=group.done if follow else sent, note=note)
            if exhausted and not pending and (group.finished or not follow):
                return group, existing
            if not pending:
                time.sleep(POLL_SECONDS)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _summarise(
    file: Path, checked: records.Checked, group: JobGroup, existing: set[uuid.UUID], seconds: float, *, waited: bool
) -> None:
    jobs = _plural(len(group), "job")
    if not waited:
        typer.echo(f"{file.name}: {checked.items:,} items sent in {jobs} (follow one: mnemoflow job ID)")
        return
    new = [job for job in group.jobs if job is not None and job.id not in existing]
    created = sum(int(job.result.get("created", 0)) for job in new)
    duplicates = sum(int(job.result.get("duplicates", 0)) for job in new)
    again = f" ({len(existing):,} sent by an earlier run, not stored again)" if existing else ""
    skipped = f"; {_plural(checked.bad_count, 'bad record')} left out" if checked.bad_count else ""
    typer.echo(
        f"{file.name}: {group.done:,} items in {jobs}{again} in {seconds:.1f} s, "
        f"{group.done / max(seconds, 1e-9):,.0f} items/s: {created:,} new memories, {duplicates:,} already stored"
        f"{skipped}"
    )
    if failed := group.failed:
        for job in failed[:SHOWN_BAD]:
            typer.echo(f"error: job {job.id} failed: {job.error}", err=True)
        raise typer.Exit(1)


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def register(app: typer.Typer) -> None:
    """Add `batch` to the `mnemoflow` app."""
    app.command()(batch)
