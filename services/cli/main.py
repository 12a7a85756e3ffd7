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

from shared.config import Settings, get_settings

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
) -> None:
    """Store one memory."""
    body = _call("POST", "/memory/add", json={"content": content, "tags": tag or [], "user_id": user})
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
) -> None:
    """Ask for the memories that matter for TEXT."""
    request = {"query": text, "k": k, "user_id": user, "explain": explain, "token_budget": token_budget}
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


def _follow(job_id: str, interval: float = 1.0) -> dict[str, Any]:
    """Print a job's progress on one line until it ends; returns its last state."""
    while True:
        job = _call("GET", f"/jobs/{job_id}")
        done, total = job["progress"]["done"], job["progress"]["total"]
        share = f"{100 * done / total:5.1f}%" if total else "  ...  "
        typer.echo(f"\r{job['status']:<9} {share}  {done:,}/{total:,}", nl=False)
        if job["status"] in ("succeeded", "failed"):
            typer.echo("")
            return dict(job)
        time.sleep(interval)


if __name__ == "__main__":
    app()
