"""The `mnemoflow` commands that talk to a running gateway, on the Python client (`mnemoflow_client`).

The gateway is $MNEMOFLOW_URL (default: this machine's MNEMOFLOW_HOST and PORT), the key $MNEMOFLOW_API_KEY. An
error the gateway answers is printed as `error (STATUS): its message` and ends the command with status 1.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from mnemoflow_client import Mnemoflow, MnemoflowError, TransportError

from services.cli import progress
from shared.config import get_settings
from shared.model.statuses import JobStatus, RunStatus

User = Annotated[
    str | None,
    typer.Option("--user", "-u", "--user-id", help="The tenant (user_id) to act for [the key's, or anonymous]"),
]


def gateway_url() -> str:
    """$MNEMOFLOW_URL, else the gateway `mnemoflow up` starts with this machine's settings."""
    settings = get_settings()
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
    return os.environ.get("MNEMOFLOW_URL") or f"http://{host}:{settings.port}"


@contextmanager
def connect(user: str | None = None) -> Iterator[Mnemoflow]:
    """A client of the gateway acting for `user`; an error it raises ends the command with a readable message."""
    try:
        with Mnemoflow(gateway_url(), user_id=user) as client:
            yield client
    except TransportError as exc:
        typer.echo(f"error: {exc.message}", err=True)  # names the URL and asks whether the stack runs
        raise typer.Exit(1) from exc
    except MnemoflowError as exc:
        typer.echo(f"error ({exc.status}): {exc.message}" if exc.status else f"error: {exc.message}", err=True)
        raise typer.Exit(1) from exc


def _dumped(value: Any) -> str:
    return json.dumps(value, indent=2, default=str)


def status() -> None:
    """Show the gateway's health: version, embedding provider, database, broker and workers.

    mnemoflow status
    """
    with connect() as client:
        typer.echo(_dumped(client.health()))


def add(
    content: str,
    tag: Annotated[list[str] | None, typer.Option("--tag", "-t", help="A tag (repeatable)")] = None,
    user: User = None,
    follows: Annotated[
        str | None, typer.Option(help="Id of the memory this one comes after (the previous turn): links them")
    ] = None,
    occurred_at: Annotated[
        str | None,
        typer.Option(help="When what it records happened, ISO 8601 (2023-05-08 or 2023-05-08T13:56:00+02:00)"),
    ] = None,
) -> None:
    """Store one memory; it is queryable when the command returns.

    mnemoflow add "Noa booked the ferry for May 12" -t trip --occurred-at 2023-05-08
    """
    with connect(user) as client:
        memory = client.add(content, tags=tag or None, follows=follows, occurred_at=occurred_at)
    note = " (already stored)" if memory.deduplicated else ""
    typer.echo(f"{memory.id}  {memory.primary_sector}{note}")


def query(
    text: str,
    k: Annotated[int, typer.Option("-k", help="How many memories")] = 8,
    user: User = None,
    explain: Annotated[bool, typer.Option(help="Show why each memory was recalled")] = False,
    token_budget: Annotated[
        int | None, typer.Option(help="Fill at most this many tokens with the best memories (still at most k)")
    ] = None,
    tag: Annotated[
        list[str] | None, typer.Option("--tag", "-t", help="Only memories with this tag (repeatable)")
    ] = None,
    sector: Annotated[str | None, typer.Option(help="Only memories of this sector")] = None,
    occurred_after: Annotated[
        str | None, typer.Option(help="Only memories that happened at or after this time, ISO 8601")
    ] = None,
    occurred_before: Annotated[
        str | None, typer.Option(help="Only memories that happened at or before this time, ISO 8601")
    ] = None,
) -> None:
    """Ask for the memories that matter for TEXT.

    A month, a year or a phrase like "yesterday" in TEXT ranks what happened then first; the options filter:

        mnemoflow query "what did Noa say about the ferry?" -t trip --occurred-after 2023-05-01
    """
    with connect(user) as client:
        answer = client.query(
            text,
            k=k,
            explain=explain,
            token_budget=token_budget,
            tags=tag or None,
            sector=sector,
            occurred_after=occurred_after,
            occurred_before=occurred_before,
        )
    if not answer.matches:
        typer.echo("no memories above the threshold")
    for match in answer.matches:
        typer.echo(f"{match.score:.3f}  [{match.primary_sector}]  {match.content[:100]}")
        if explain and match.trace is not None:
            typer.echo(f"       {match.trace.model_dump_json(exclude_none=True)}")
    if answer.packing is not None:
        typer.echo(answer.packing.footnote)


def _metadata(pairs: list[str] | None) -> dict[str, str]:
    metadata = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{pair!r} is not key=value", param_hint="--meta")
        metadata[key] = value
    return metadata


def ingest(
    source: Annotated[
        str, typer.Argument(help="A file (PDF, DOCX, HTML, Markdown, text, audio, video…) or an http(s) URL")
    ],
    user: User = None,
    wait: Annotated[
        bool, typer.Option(help="Follow the job with a progress bar until the document is stored, then summarise it")
    ] = False,
    tag: Annotated[list[str] | None, typer.Option("--tag", "-t", help="A tag for every chunk (repeatable)")] = None,
    meta: Annotated[
        list[str] | None, typer.Option("--meta", "-m", help="key=value metadata for the document (repeatable)")
    ] = None,
    chunk_size: Annotated[int | None, typer.Option(help="Max tokens per chunk [2048]")] = None,
    chunk_overlap: Annotated[int | None, typer.Option(help="Tokens repeated between chunks [256]")] = None,
    occurred_at: Annotated[
        str | None,
        typer.Option(help="When what it records happened, ISO 8601 (a meeting's date): set on every chunk"),
    ] = None,
) -> None:
    """Ingest a document, a recording or a web page: it is extracted, chunked and stored as memories.

    Files are uploaded (their format is read from their bytes); URLs are fetched by the server, which
    refuses private addresses. The same file or URL twice is one document. Examples:

        mnemoflow ingest report.pdf --wait

        mnemoflow ingest https://example.org/post --user alice --tag blog
    """
    options: dict[str, Any] = {
        "tags": tag or None,
        "metadata": _metadata(meta) or None,
        "chunk_size": chunk_size,
        "chunk_overlap": chunk_overlap,
        "occurred_at": occurred_at,
    }
    is_url = source.startswith(("http://", "https://"))
    if not is_url and not Path(source).is_file():
        raise typer.BadParameter(f"no such file: {source}", param_hint="SOURCE")
    with connect(user) as client:
        accepted = client.ingest_url(source, **options) if is_url else client.ingest_file(source, **options)
        note = {"existing": " (already ingested)", "retried": " (failed before; started again)"}.get(accepted.status)
        typer.echo(f"document {accepted.document_id}  job {accepted.job_id}{note or ''}")
        if not wait:
            typer.echo(f"follow it with: mnemoflow job {accepted.job_id}")
            return
        job = None
        if accepted.job_id is not None:
            with progress.job_bar(f"ingest {Path(source).name or source}") as moved:
                job = client.wait(accepted, on_progress=moved)
        document = client.document(accepted.document_id)
    ended = {document.status, job.status if job is not None else None} & {JobStatus.FAILED, JobStatus.CANCELLED}
    if ended:
        how = JobStatus.CANCELLED if JobStatus.CANCELLED in ended else JobStatus.FAILED
        typer.echo(f"ingest {how}: {document.error or (job.error if job else None)}", err=True)
        raise typer.Exit(1)
    stages = "  ".join(f"{k.removesuffix('_ms')} {v} ms" for k, v in document.stages_ms.items())
    typer.echo(
        f"{document.status}: {document.format}, {document.byte_size or 0:,} bytes, "
        f"{document.chunk_count} chunks -> {document.memories_total} memories\n{stages}"
    )


def job(job_id: str, user: User = None) -> None:
    """Show a job's status and progress (done/total), attempts, error and result.

    mnemoflow job 6f1c2d3e-...
    """
    with connect(user) as client:
        typer.echo(client.job(job_id).model_dump_json(indent=2))


def reembed(
    provider: Annotated[
        str, typer.Option(help="The provider to move the store to: synthetic, local, static, openai or ollama")
    ],
    dimensions: Annotated[int | None, typer.Option(help="Its dimension (HTTP providers only)")] = None,
    sector: Annotated[
        list[str] | None,
        typer.Option("--sector", help="Only this sector (repeatable; a model per sector needs OM_EMBED_MODE=advanced)"),
    ] = None,
    wait: Annotated[bool, typer.Option(help="Follow the job with a progress bar until it ends")] = True,
) -> None:
    """Re-embed every memory with another embedding provider, on the sector queues of the running stack.

    Run it against the stack as it is configured now (needs the operator key, MNEMOFLOW_API_KEY, when keys
    are configured). Queries keep working meanwhile. When it succeeds, restart the stack with the new
    MNEMOFLOW_EMBEDDING_PROVIDER; until then writers of the old model are refused with that advice.

        mnemoflow reembed --provider local
    """
    with connect() as client:
        accepted = client.reembed(provider, dimensions=dimensions, sectors=sector or None)
        old = sorted({f"{m.model} ({m.dim}d)" for m in accepted.from_.values()}) or ["?"]
        new = accepted.to
        typer.echo(
            f"job {accepted.job_id}: {', '.join(accepted.sectors)}: {' + '.join(old)} -> {new.model} ({new.dim}d)"
        )
        if not wait:
            typer.echo(f"follow it with: mnemoflow job {accepted.job_id}")
            return
        with progress.job_bar("re-embed") as moved:
            done = client.wait(accepted, on_progress=moved)
    if done.status != JobStatus.SUCCEEDED:
        typer.echo(f"re-embed {done.status}: {done.error}", err=True)
        raise typer.Exit(1)
    typer.echo(
        f"done: {done.progress['done']:,} memories re-embedded. Restart the stack with "
        f"{done.result.get('restart_with', 'the new provider')} (mnemoflow down; then mnemoflow up)."
    )


def decay(
    ratio: Annotated[
        float | None,
        typer.Option(min=0.0, max=1.0, help="Share of each sector to process; 1.0 = every memory [OM_DECAY_RATIO]"),
    ] = None,
    wait: Annotated[bool, typer.Option(help="Follow the cycle with a progress bar until it ends")] = True,
) -> None:
    """Run a decay cycle now: re-tier memories, decay salience, compress and fingerprint the unused ones.

    Scheduled cycles run every OM_DECAY_INTERVAL_MINUTES on their own; this one does not wait for queries to
    go quiet, but never runs beside another cycle. Needs the operator key (MNEMOFLOW_API_KEY) when keys are set.
    The bar counts memories processed of those the cycle's plan walks (known once it has started).

        mnemoflow decay --ratio 1.0
    """
    if ratio is not None and ratio <= 0:
        raise typer.BadParameter("must be above 0", param_hint="--ratio")
    with connect() as client:
        run = client.decay(ratio)
        typer.echo(f"decay run {run.id} ({run.ratio:.0%} of each sector)")
        if not wait:
            typer.echo(f"follow it with: curl {gateway_url()}{run.status_url}")
            return
        with progress.decay_bar() as moved:
            run = client.wait_decay(run, on_progress=moved)
    if run.status == RunStatus.SUCCEEDED:
        typer.echo(run.log)
    else:
        typer.echo(f"decay {run.status}: {run.reason}", err=True)
        raise typer.Exit(1)


def stats(runs: Annotated[int, typer.Option(min=0, max=100, help="How many recent decay runs to show")] = 5) -> None:
    """The store's lifecycle: tiers, compression, average salience, the fresh tier's backlog (vectors a bulk import
    stored that the merge has not yet indexed), and the recent decay runs (operator).

    mnemoflow stats --runs 10
    """
    with connect() as client:
        body = client.stats(runs=runs)
    tiers, compression = body["tiers"], body["compression"]
    typer.echo(f"memories: {body['memories']:,}  average salience {body['avg_salience']:.3f}")
    typer.echo("tiers:       " + "  ".join(f"{k}={v:,}" for k, v in tiers.items()))
    typer.echo("compression: " + "  ".join(f"{k}={v:,}" for k, v in compression.items()))
    if body["compressed_by_dim"]:
        typer.echo("compressed:  " + "  ".join(f"{dim}d={n:,}" for dim, n in body["compressed_by_dim"].items()))
    index = body["index"]
    waiting = "  ".join(f"{sector}={n:,}" for sector, n in index["fresh_by_sector"].items() if n)
    typer.echo(
        f"fresh tier:  {index['fresh_vectors']:,} vectors waiting for the index" + (f" ({waiting})" if waiting else "")
    )
    for run in body["recent_runs"]:
        when = (run["finished_at"] or run["created_at"])[:19]
        detail = run.get("log") or run["reason"] or ""
        typer.echo(f"{when}  {run['trigger']:<9} {run['status']:<9} {detail}")


COMMANDS: tuple[Callable[..., None], ...] = (status, add, query, ingest, job, reembed, decay, stats)


def register(app: typer.Typer) -> None:
    """Add these commands to the `mnemoflow` app."""
    for command in COMMANDS:
        app.command()(command)
