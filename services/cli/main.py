"""The `mnemoflow` command: run the stack, migrate, and talk to a running gateway."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from services.cli import bulk, commands, data
from services.mcp import command as mcp_command
from shared.config import OpenAccessRefused, Settings, get_settings
from shared.config.secrets import private_dir, private_file

app = typer.Typer(
    help="Mnemoflow: long-term memory for AI agents.\n\n"
    "Start everything with `mnemoflow up`; then add and query memories over HTTP or with this tool:\n\n"
    '    mnemoflow add "Alice prefers green tea" -t prefs -u alice\n\n'
    '    mnemoflow query "what does Alice drink?" -u alice\n\n'
    "    mnemoflow batch notes.jsonl -u alice\n\n"
    "The commands that talk to a gateway use $MNEMOFLOW_URL (default http://127.0.0.1:8080) and "
    "$MNEMOFLOW_API_KEY.",
    no_args_is_help=True,
    rich_markup_mode="markdown",  # help texts reflow; indented examples show as code
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
        private_dir(settings.data_dir)
        log = os.fdopen(private_file(settings.data_dir / "logs-supervisor.log"), "ab")  # its user's only
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
    """Outside development, start nothing without the API keys, the operator key and (for Flower) its login; in
    every environment, nothing keyless beyond loopback."""
    try:
        settings.require_keys("the stack", listens_on=settings.host)
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


commands.register(app)
bulk.register(app)
data.register(app)  # export, import, erase, cancel, backup, restore
mcp_command.register(app)  # mnemoflow mcp: the MCP server (services/mcp)


if __name__ == "__main__":
    app()
