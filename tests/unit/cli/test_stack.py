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


def test_the_worker_and_the_sweeper_each_get_a_metrics_port_and_directory_of_their_own(tmp_path):
    stack = Stack(Settings(data_dir=tmp_path), echo=False)
    assert stack.metrics_ports == {"worker": 9540, "sweeper": 9541}
    worker, sweeper = stack.worker_env("worker"), stack.worker_env("sweeper")
    assert worker["MNEMOFLOW_WORKER_METRICS_PORT"] == "9540" and sweeper["MNEMOFLOW_WORKER_METRICS_PORT"] == "9541"
    assert worker["MNEMOFLOW_WORKER_METRICS_DIR"] != sweeper["MNEMOFLOW_WORKER_METRICS_DIR"]
    assert stack.metrics_urls["sweeper"] == "http://127.0.0.1:9541/metrics"

    moved = Stack(Settings(data_dir=tmp_path, worker_metrics_port=9700), echo=False)
    assert moved.metrics_ports == {"worker": 9700, "sweeper": 9701}
    off = Stack(Settings(data_dir=tmp_path, worker_metrics_port=0), echo=False)
    assert off.metrics_ports == {} and off.worker_env("worker") == {"MNEMOFLOW_WORKER_METRICS_PORT": "0"}
