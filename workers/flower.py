"""Flower as Mnemoflow runs it: `celery -A workers.app flower`, with its /metrics and /healthcheck behind the same
login as every other page.

Flower leaves those two open whatever its --basic_auth (their handlers lack tornado's `authenticated`), and its
/metrics names every task and worker. Run as `python -m workers.flower [flower options]`.
"""

from __future__ import annotations

import sys

from celery.bin.celery import main as celery_main
from flower.views import monitor
from tornado import web


def close_open_pages() -> None:
    """Give /metrics and /healthcheck the login check of Flower's other pages (none when it has no login)."""
    for handler in (monitor.Metrics, monitor.Healthcheck):
        if not getattr(handler.get, "_mnemoflow_closed", False):
            closed = web.authenticated(handler.get)
            closed._mnemoflow_closed = True  # type: ignore[attr-defined]
            handler.get = closed


def main(argv: list[str]) -> int:
    close_open_pages()
    from workers.app import app  # the app `-A workers.app` names, imported once: the same object

    # Flower sends no task of its own: whatever its API is asked to send goes unsigned, and the workers refuse it.
    app.amqp.signing_key = None
    sys.argv = ["celery", "-A", "workers.app", "flower", *argv]
    return int(celery_main() or 0)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
