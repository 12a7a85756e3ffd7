"""`mnemoflow export`, `import`, `erase`, `cancel` (on the Python client, against any stack) and `backup`, `restore`
(the store itself, with pg_dump and pg_restore): the data a tenant owns (docs/data.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import httpx
import typer
from mnemoflow_client import ImportAccepted

from services.cli import progress
from services.cli.commands import connect
from shared.model.statuses import JobStatus

UserOption = Annotated[str | None, typer.Option("--user-id", "--user", "-u", help="Tenant user_id")]


def export(
    user_id: UserOption = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to FILE (default: standard output)")
    ] = None,
    vectors: Annotated[bool, typer.Option(help="Carry the vectors (re-used on import when the model matches)")] = True,
) -> None:
    """Export a tenant's documents, memories and waypoints as JSON Lines (the format: docs/data.md).

    mnemoflow export --user-id alice -o alice.jsonl
    """
    partial = output.with_name(output.name + ".partial") if output else None
    target = open(partial, "wb") if partial else sys.stdout.buffer  # noqa: SIM115
    last = b""
    try:
        with connect(user_id) as client:
            try:
                for line in client.export(vectors=vectors):
                    target.write(line)
                    last = line
            except httpx.HTTPError as exc:  # the stream broke off: what was written is not a whole export
                typer.echo(f"error: the export broke off ({exc}); try again", err=True)
                raise typer.Exit(1) from exc
    finally:
        if partial:
            target.close()
    end = json.loads(last) if last.strip() else {}
    if end.get("type") != "end":
        typer.echo("error: the export ended without its end line: it was cut short; try again", err=True)
        if partial:
            partial.unlink(missing_ok=True)
        raise typer.Exit(1)
    if output and partial:
        partial.replace(output)
        counts = f"{end['memories']:,} memories, {end['waypoints']:,} waypoints, {end['documents']:,} documents"
        typer.echo(f"{output}: {counts}", err=True)


def import_(
    file: Annotated[Path, typer.Argument(help="An export (JSON Lines) made by `mnemoflow export`")],
    user_id: UserOption = None,
    wait: Annotated[bool, typer.Option(help="Follow the job with a progress bar until the file is stored")] = True,
) -> None:
    """Import an export into a tenant (its own, or another one's file). Importing a file twice stores nothing twice.

    mnemoflow import alice.jsonl --user-id alice
    """
    if not file.is_file():
        raise typer.BadParameter(f"no such file: {file}", param_hint="FILE")
    with connect(user_id) as client:
        accepted = client.import_file(file)
        typer.echo(
            f"{accepted.memories:,} memories, {accepted.waypoints:,} waypoints, {accepted.documents:,} documents "
            f"from {accepted.source_user_id!r} into {accepted.user_id!r}"
            + (f": job {accepted.job_id}" if accepted.job_id else "")
        )
        _say_lines(accepted)
        if accepted.status != JobStatus.QUEUED or accepted.job_id is None:
            return
        if not wait:
            typer.echo(f"follow it with: mnemoflow job {accepted.job_id}")
            return
        with progress.job_bar(f"import {file.name}") as moved:
            job = client.wait(accepted.job_id, on_progress=moved)
    if job.status != JobStatus.SUCCEEDED:
        typer.echo(f"import {job.status}: {job.error or ''}", err=True)
        raise typer.Exit(1)
    result = job.result
    typer.echo(
        f"stored: {result.get('created', 0):,} new, {result.get('existing', 0):,} already there, "
        f"{result.get('reembedded', 0):,} embedded again, {result.get('links', 0):,} waypoints"
    )


def _say_lines(accepted: ImportAccepted, shown: int = 5) -> None:
    """The lines the import skips or stores under another id, a few of each, and how many."""
    if not (accepted.skipped_lines or accepted.rekeyed_lines):
        return
    typer.echo(
        f"{accepted.stored:,} lines to store, {accepted.skipped_lines:,} skipped, "
        f"{accepted.rekeyed_lines:,} stored under another id"
    )
    for skipped in accepted.skipped[:shown]:
        typer.echo(f"  line {skipped.line}: skipped: {skipped.why}")
    for rekeyed in accepted.rekeyed[:shown]:
        typer.echo(f"  line {rekeyed.line}: stored as {rekeyed.id}: {rekeyed.why}")
    hidden = accepted.skipped_lines + accepted.rekeyed_lines - min(shown, len(accepted.skipped))
    hidden -= min(shown, len(accepted.rekeyed))
    if hidden > 0:
        typer.echo(f"  ... and {hidden:,} more")


def erase(
    user_id: Annotated[str, typer.Option("--user-id", "-u", help="The tenant to erase")],
    yes: Annotated[bool, typer.Option("--yes", help="Confirm: this cannot be undone")] = False,
    wait: Annotated[bool, typer.Option(help="Follow the erasure until it ends")] = True,
) -> None:
    """Erase a tenant: every memory, vector, waypoint, document, job and key in Valkey of it (operator key).

    Export it first if you may want it back (`mnemoflow export`).
    """
    if not yes:
        typer.echo(f"this erases everything of user_id {user_id!r} and cannot be undone: add --yes", err=True)
        raise typer.Exit(2)
    with connect() as client:
        accepted = client.erase(user_id)
        note = " (an erasure already under way)" if accepted.existing else ""
        typer.echo(f"erasing {user_id!r}: job {accepted.job_id}{note}")
        if not wait:
            typer.echo(f"follow it with: mnemoflow job {accepted.job_id}")
            return
        with progress.job_bar(f"erase {user_id}") as moved:
            job = client.wait(accepted.job_id, on_progress=moved)
    if job.status != JobStatus.SUCCEEDED:
        typer.echo(f"erasure {job.status}: {job.error or ''}", err=True)
        raise typer.Exit(1)
    deleted = job.result.get("deleted") or {}
    first = ("memories", "documents", "jobs")
    ordered = [w for w in first if w in deleted] + sorted(w for w in deleted if w not in first)
    typer.echo("erased: " + (", ".join(f"{deleted[w]:,} {w}" for w in ordered if deleted[w]) or "nothing was stored"))


def cancel(
    job_id: Annotated[str, typer.Argument(help="The job to cancel")],
    user_id: UserOption = None,
) -> None:
    """Cancel a queued or running job: its remaining chunks are skipped, what it stored stays.

    mnemoflow cancel 0b6f... --user-id alice
    """
    with connect(user_id) as client:
        job = client.cancel(job_id)
    done, total = job.progress.get("done", 0), job.progress.get("total", 0)
    typer.echo(f"job {job.id} cancelled: {done:,} of {total:,} stored, the rest skipped")


def backup(
    file: Annotated[Path | None, typer.Argument(help="Where to write it (default: mnemoflow-<time>.dump)")] = None,
) -> None:
    """Back the store up with pg_dump (custom format), while it runs or not.

    The store: the data dir's embedded server (started for the command if it is not running) or DATABASE_URL's
    database. pg_dump reads one consistent snapshot. Valkey (queues, caches) is not in it: docs/data.md.
    """
    from datetime import UTC, datetime

    from infra.backup import BackupError
    from infra.backup import backup as dump
    from shared.config import get_settings

    settings = get_settings()
    target = file or Path(f"mnemoflow-{datetime.now(UTC):%Y%m%d-%H%M%S}.dump")
    try:
        size = dump(settings.database_url, settings.data_dir, target)
    except BackupError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"{target}: {size:,} bytes")


def restore(
    file: Annotated[Path, typer.Argument(help="A backup made by `mnemoflow backup`")],
    force: Annotated[bool, typer.Option(help="Replace a store that is not empty")] = False,
) -> None:
    """Restore a backup with pg_restore into an empty store (--force: replace one), the stack stopped.

    The store: the data dir's embedded one (made if there is none) or DATABASE_URL's database. It is migrated to
    this version afterwards.
    """
    from infra.backup import BackupError
    from infra.backup import restore as load
    from shared.config import get_settings

    settings = get_settings()
    try:
        held = load(settings.database_url, settings.data_dir, file, force=force)
    except BackupError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo("restored: " + (", ".join(f"{n:,} {table}" for table, n in held.items()) or "an empty store"))


def register(app: typer.Typer) -> None:
    """Add these commands to the `mnemoflow` app."""
    app.command()(export)
    app.command("import")(import_)
    app.command()(erase)
    app.command()(cancel)
    app.command()(backup)
    app.command()(restore)
