"""Plain, greppable log lines for every process."""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def configure_logging(level: str = "INFO") -> None:
    root = logging.getLogger()
    if not any(getattr(h, "_mnemoflow", False) for h in root.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(FORMAT))
        handler._mnemoflow = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(level.upper())
