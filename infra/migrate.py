"""Apply the schema migrations programmatically (used by the CLI, the launcher and the tests)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

HERE = Path(__file__).resolve().parent


def alembic_config(database_url: str) -> Config:
    """An Alembic config bound to one database."""
    config = Config(str(HERE / "alembic.ini"))
    config.set_main_option("script_location", str(HERE / "migrations"))
    config.attributes["database_url"] = database_url
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Bring the database to `revision` (default: the newest)."""
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str) -> None:
    """Take the database back to `revision` (an operator undoing a release; the migrations' tests)."""
    command.downgrade(alembic_config(database_url), revision)
