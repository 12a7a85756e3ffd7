"""The `mnemoflow` command: run the stack, migrate, and talk to a running gateway."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from services.cli.data import register as register_data_commands
from shared.config import OpenAccessRefused, Settings, get_settings

app = typer.Typer(
    help="Mnemoflow: long-term memory for AI agents.\n\n"
    "Start everything with `mnemoflow up`; then add and query memories over HTTP or with this tool.",
    no_args_is_help=True,
    add_completion=False,
)


def _settings(data_dir: Path | None = None, port: int | None = None) -> Settings:
    overrides: dict[str, Any] = {}
    if data_dir is not None:
        overrides["data_dir"] = data_dir
    if port is not None:
        overrides["port"] = port
    return get_settings().model_copy(update=overrides) if overrides else get_settings()


@app.command()
def up(
    data_dir: Annotated[Path | None, typer.Option(help="Where embedded data and logs live [.mnemoflow]")] = None,
    port: Annotated[int | None, typer.Option(help="Gateway port [8080, or $PORT]")] = None,
    flower: Annotated[bool, typer.Option(help="Start the Flower dashboard")] = True,
    detach: Annotated[bool, typer.Option(help="Run in the background; stop with `mnemoflow down`")] = False,
) -> None:
    """Start PostgreSQL+pgvector and Valkey (embedded unless DATABASE_URL/REDIS_URL are set), migrate,
    then the workers, beat, the gateway and Flower. Ctrl-C stops all of it."""
    from services.cli.stack import STATE_FILE, run_foreground

    settings = _settings(data_dir, port)
    _refuse_open(settings, with_flower=flower)
    if detach:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(settings.data_dir / "logs-supervisor.log", "ab")  # noqa: SIM115
        args = [
            sys.executable,
            "-m",
            "services.cli.main",
            "up",
            "--data-dir",
            str(settings.data_dir),
            "--port",
            str(settings.port),
        ] + ([] if flower else ["--no-flower"])
        subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, stdin=subprocess.DEVNULL)
        state = settings.data_dir.resolve() / STATE_FILE
        for _ in range(240):
            if state.exists():
                try:
                    if httpx.get(f"http://{settings.host}:{settings.port}/health", timeout=2).status_code == 200:
                        typer.echo(f"Mnemoflow is running in the background: http://{settings.host}:{settings.port}")
                        return
                except httpx.HTTPError:
                    pass
            time.sleep(0.5)
        typer.echo(f"the stack did not come up; see {settings.data_dir / 'logs-supervisor.log'}", err=True)
        raise typer.Exit(1)
    raise typer.Exit(run_foreground(settings, with_flower=flower))


def _refuse_open(settings: Settings, *, with_flower: bool) -> None:
    """Outside development, start nothing without the API keys, the operator key and (for Flower) its login."""
    try:
        settings.require_keys("the stack")
    except OpenAccessRefused as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if with_flower and settings.environment != "development" and not os.environ.get("FLOWER_BASIC_AUTH"):
        typer.echo(
            "error: Flower shows every queue and task and has no login of its own: set FLOWER_BASIC_AUTH=user:password "
            "outside development, or start without it (--no-flower)",
            err=True,
        )
        raise typer.Exit(2)


@app.command()
def down(
    data_dir: Annotated[Path | None, typer.Option(help="The data dir of the stack to stop [.mnemoflow]")] = None,
) -> None:
    """Stop a stack started with `mnemoflow up` (in another shell or with --detach)."""
    from services.cli.stack import stop_background

    typer.echo(stop_background(_settings(data_dir)))


@app.command()
def migrate(
    database_url: Annotated[str | None, typer.Option(help="Database to migrate [$DATABASE_URL]")] = None,
) -> None:
    """Apply the schema migrations to DATABASE_URL (creates the vector extension)."""
    from infra.migrate import upgrade

    url = database_url or get_settings().database_url
    if not url:
        typer.echo("error: set DATABASE_URL or pass --database-url", err=True)
        raise typer.Exit(2)
    upgrade(url)
    typer.echo("migrations applied")


def _client() -> httpx.Client:
    settings = get_settings()
    base = os.environ.get("MNEMOFLOW_URL", f"http://{settings.host}:{settings.port}")
    headers = {}
    if key := os.environ.get("MNEMOFLOW_API_KEY"):
        headers["Authorization"] = f"Bearer {key}"
    return httpx.Client(base_url=base, headers=headers, timeout=30)


def _call(method: str, path: str, **kwargs: Any) -> Any:
    try:
        with _client() as client:
            response = client.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        typer.echo(f"error: cannot reach the gateway ({exc}); is `mnemoflow up` running? (MNEMOFLOW_URL)", err=True)
        raise typer.Exit(1) from exc
    body = response.json()
    if response.status_code >= 400:
        message = body.get("error", {}).get("message", response.text)
        typer.echo(f"error ({response.status_code}): {message}", err=True)
        raise typer.Exit(1)
    return body


@app.command()
def status() -> None:
    """Show the gateway's health: version, embedding provider, database and broker."""
    typer.echo(json.dumps(_call("GET", "/health"), indent=2))


@app.command()
def add(
    content: str,
    tag: Annotated[list[str] | None, typer.Option("--tag", "-t", help="A tag (repeatable)")] = None,
    user: Annotated[str | None, typer.Option("--user", "-u", help="Tenant user_id")] = None,
    follows: Annotated[
        str | None, typer.Option(help="Id of the memory this one comes after (the previous turn): links them")
    ] = None,
    occurred_at: Annotated[
        str | None,
        typer.Option(help="When what it records happened, ISO 8601 (2023-05-08 or 2023-05-08T13:56:00+02:00)"),
    ] = None,
) -> None:
    """Store one memory."""
    request = {"content": content, "tags": tag or [], "user_id": user, "follows": follows}
    if occurred_at is not None:
        request["occurred_at"] = occurred_at
    body = _call("POST", "/memory/add", json=request)
    note = " (already stored)" if body.get("deduplicated") else ""
    typer.echo(f"{body['id']}  {body['primary_sector']}{note}")


@app.command()
def query(
    text: str,
    k: Annotated[int, typer.Option("-k", help="How many memories")] = 8,
    user: Annotated[str | None, typer.Option("--user", "-u", help="Tenant user_id")] = None,
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
    filters = {
        name: value
        for name, value in (
            ("tags", tag),
            ("sector", sector),
            ("occurred_after", occurred_after),
            ("occurred_before", occurred_before),
        )
        if value
    }
    request = {"query": text, "k": k, "user_id": user, "explain": explain, "token_budget": token_budget}
    if filters:
        request["filters"] = filters
    body = _call("POST", "/memory/query", json=request)
    if not body["matches"]:
        typer.echo("no memories above the threshold")
    for match in body["matches"]:
        typer.echo(f"{match['score']:.3f}  [{match['primary_sector']}]  {match['content'][:100]}")
        if explain and match.get("trace"):
            typer.echo(f"       {json.dumps(match['trace'])}")
    if body.get("packing"):
        typer.echo(body["packing"]["footnote"])


@app.command()
def ingest(
    source: Annotated[
        str, typer.Argument(help="A file (PDF, DOCX, HTML, Markdown, text, audio, video…) or an http(s) URL")
    ],
    user: Annotated[str | None, typer.Option("--user", "-u", help="Tenant user_id")] = None,
    wait: Annotated[bool, typer.Option(help="Follow the job until the document is stored, then summarise it")] = False,
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
    metadata = {}
    for pair in meta or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{pair!r} is not key=value", param_hint="--meta")
        metadata[key] = value
    config = {k: v for k, v in (("chunk_size", chunk_size), ("chunk_overlap", chunk_overlap)) if v is not None}
    when = {"occurred_at": occurred_at} if occurred_at is not None else {}
    if source.startswith(("http://", "https://")):
        request = {"url": source, "user_id": user, "tags": tag or [], "metadata": metadata, "config": config} | when
        body = _call("POST", "/memory/ingest/url", json=request)
    else:
        path = Path(source)
        if not path.is_file():
            raise typer.BadParameter(f"no such file: {source}", param_hint="SOURCE")
        fields = {"metadata": json.dumps(metadata), "tags": ",".join(tag or [])} | when
        fields |= {k: str(v) for k, v in config.items()} | ({"user_id": user} if user else {})
        with open(path, "rb") as handle:
            files = {"file": (path.name, handle, "application/octet-stream")}
            body = _call("POST", "/memory/ingest/file", files=files, data=fields, timeout=300)
    note = {"existing": " (already ingested)", "retried": " (failed before; started again)"}.get(body["status"], "")
    typer.echo(f"document {body['document_id']}  job {body['job_id']}{note}")
    if not wait:
        typer.echo(f"follow it with: mnemoflow job {body['job_id']}")
        return
    job = _follow(body["job_id"], user=user) if body["job_id"] else None
    document = _call("GET", f"/documents/{body['document_id']}", params={"user_id": user} if user else None)
    if document["status"] in ("failed", "cancelled") or (job and job["status"] in ("failed", "cancelled")):
        ended = "cancelled" if document["status"] == "cancelled" else "failed"
        typer.echo(f"ingest {ended}: {document['error'] or (job or {}).get('error')}", err=True)
        raise typer.Exit(1)
    stages = "  ".join(f"{k.removesuffix('_ms')} {v} ms" for k, v in document["stages_ms"].items())
    typer.echo(
        f"{document['status']}: {document['format']}, {document['byte_size'] or 0:,} bytes, "
        f"{document['chunk_count']} chunks -> {document['memories_total']} memories\n{stages}"
    )


@app.command()
def job(job_id: str, user: Annotated[str | None, typer.Option("--user", "-u")] = None) -> None:
    """Show a job's status and progress."""
    typer.echo(json.dumps(_call("GET", f"/jobs/{job_id}", params={"user_id": user} if user else None), indent=2))


@app.command()
def reembed(
    provider: Annotated[
        str, typer.Option(help="The provider to move the store to: synthetic, local, static, openai or ollama")
    ],
    dimensions: Annotated[int | None, typer.Option(help="Its dimension (HTTP providers only)")] = None,
    sector: Annotated[
        list[str] | None,
        typer.Option("--sector", help="Only this sector (repeatable; a model per sector needs OM_EMBED_MODE=advanced)"),
    ] = None,
    wait: Annotated[bool, typer.Option(help="Follow the job's progress until it ends")] = True,
) -> None:
    """Re-embed every memory with another embedding provider, on the sector queues of the running stack.

    Run it against the stack as it is configured now (needs the operator key, MNEMOFLOW_API_KEY, when keys
    are configured). Queries keep working meanwhile. When it succeeds, restart the stack with the new
    MNEMOFLOW_EMBEDDING_PROVIDER; until then writers of the old model are refused with that advice.
    """
    request = {"provider": provider, "dimensions": dimensions, "sectors": sector or None}
    body = _call("POST", "/maintenance/reembed", json=request)
    old = sorted({f"{m['model']} ({m['dim']}d)" for m in body["from"].values()}) or ["?"]
    new = body["to"]
    typer.echo(
        f"job {body['job_id']}: {', '.join(body['sectors'])}: {' + '.join(old)} -> {new['model']} ({new['dim']}d)"
    )
    if not wait:
        typer.echo(f"follow it with: mnemoflow job {body['job_id']}")
        return
    job = _follow(body["job_id"])
    if job["status"] != "succeeded":
        typer.echo(f"re-embed {job['status']}: {job['error']}", err=True)
        raise typer.Exit(1)
    typer.echo(
        f"done: {job['progress']['done']:,} memories re-embedded. Restart the stack with "
        f"{job['result'].get('restart_with', 'the new provider')} (mnemoflow down; then mnemoflow up)."
    )


def _follow(job_id: str, interval: float = 1.0, user: str | None = None) -> dict[str, Any]:
    """Print a job's progress on one line until it ends; returns its last state."""
    while True:
        job = _call("GET", f"/jobs/{job_id}", params={"user_id": user} if user else None)
        done, total = job["progress"]["done"], job["progress"]["total"]
        share = f"{100 * done / total:5.1f}%" if total else "  ...  "
        typer.echo(f"\r{job['status']:<9} {share}  {done:,}/{total:,}", nl=False)
        if job["status"] in ("succeeded", "failed", "cancelled"):
            typer.echo("")
            return dict(job)
        time.sleep(interval)


@app.command()
def decay(
    ratio: Annotated[
        float | None,
        typer.Option(min=0.0, max=1.0, help="Share of each sector to process; 1.0 = every memory [OM_DECAY_RATIO]"),
    ] = None,
    wait: Annotated[bool, typer.Option(help="Follow the cycle until it ends")] = True,
) -> None:
    """Run a decay cycle now: re-tier memories, decay salience, compress and fingerprint the unused ones.

    Scheduled cycles run every OM_DECAY_INTERVAL_MINUTES on their own; this one does not wait for queries to
    go quiet, but never runs beside another cycle. Needs the operator key (MNEMOFLOW_API_KEY) when keys are set.
    """
    if ratio is not None and ratio <= 0:
        raise typer.BadParameter("must be above 0", param_hint="--ratio")
    run = _call("POST", "/maintenance/decay", json={"ratio": ratio})
    typer.echo(f"decay run {run['id']} ({run['ratio']:.0%} of each sector)")
    while wait and run["status"] in ("queued", "running"):
        time.sleep(0.5)
        run = _call("GET", f"/maintenance/decay/{run['id']}")
        typer.echo(f"\r{run['status']:<9} {run['processed']:,} processed", nl=False)
    typer.echo("")
    if run["status"] == "succeeded":
        typer.echo(run["log"])
    elif run["status"] in ("skipped", "failed"):
        typer.echo(f"decay {run['status']}: {run['reason']}", err=True)
        raise typer.Exit(1)
    else:
        typer.echo(f"follow it with: curl {run['status_url']}")


@app.command()
def stats(runs: Annotated[int, typer.Option(min=0, max=100, help="How many recent decay runs to show")] = 5) -> None:
    """The store's lifecycle: tiers, compression, average salience, and the recent decay runs."""
    body = _call("GET", "/maintenance/stats", params={"runs": runs})
    tiers, compression = body["tiers"], body["compression"]
    typer.echo(f"memories: {body['memories']:,}  average salience {body['avg_salience']:.3f}")
    typer.echo("tiers:       " + "  ".join(f"{k}={v:,}" for k, v in tiers.items()))
    typer.echo("compression: " + "  ".join(f"{k}={v:,}" for k, v in compression.items()))
    if body["compressed_by_dim"]:
        typer.echo("compressed:  " + "  ".join(f"{dim}d={n:,}" for dim, n in body["compressed_by_dim"].items()))
    for run in body["recent_runs"]:
        when = (run["finished_at"] or run["created_at"])[:19]
        detail = run.get("log") or run["reason"] or ""
        typer.echo(f"{when}  {run['trigger']:<9} {run['status']:<9} {detail}")


register_data_commands(app)  # export, import, erase, cancel, backup, restore (services/cli/data.py)

if __name__ == "__main__":
    app()
