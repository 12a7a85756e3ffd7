"""The launcher starts nothing embedded when DATABASE_URL and REDIS_URL point at real servers."""

from __future__ import annotations

from services.cli.stack import Stack
from shared.config import Settings


def test_given_urls_mean_no_embedded_servers(tmp_path):
    settings = Settings(
        database_url="postgresql://db.internal/mnemoflow", redis_url="redis://cache.internal:6379/0", data_dir=tmp_path
    )
    stack = Stack(settings, echo=False)
    stack.start_servers()
    assert stack.postgres is None and stack.redis is None
    assert stack.database_url == "postgresql+psycopg://db.internal/mnemoflow"
    assert stack.redis_url == "redis://cache.internal:6379/0"
    env = stack.child_env()
    assert env["DATABASE_URL"] == stack.database_url and env["REDIS_URL"] == stack.redis_url
