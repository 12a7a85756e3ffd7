"""Each worker process's readiness, in Redis: written by the workers, read by the gateway's /health.

A pool process that has opened its database and loaded its models says so every `BEAT` seconds under a key
that outlives two beats, so a dead process drops out by itself. One whose start-up failed says that, with the
reason, before it exits to be replaced; /health lists it for a minute after.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Sequence
from typing import Any

import redis

PREFIX = "mnemoflow:workers:"
BEAT = 10.0
TTL = int(3 * BEAT)


def _key(hostname: str | None = None, pid: int | None = None) -> str:
    return f"{PREFIX}{hostname or socket.gethostname()}:{pid or os.getpid()}"


def report_ready(client: redis.Redis, queues: Sequence[str]) -> None:
    """This process serves `queues` (call every BEAT seconds)."""
    record = {"ready": True, "queues": list(queues), "at": time.time()}
    client.set(_key(), json.dumps(record), ex=TTL)


def report_failing(client: redis.Redis, queues: Sequence[str], error: str) -> None:
    """This process cannot work (its start-up failed): why, for /health, kept a while after it exits."""
    record = {"ready": False, "queues": list(queues), "error": error[:500], "at": time.time()}
    client.set(_key(), json.dumps(record), ex=2 * TTL)


def clear(client: redis.Redis) -> None:
    client.delete(_key())


def summary(client: redis.Redis) -> dict[str, Any]:
    """What /health says of the workers: how many processes are ready, per queue, and which cannot work."""
    ready = 0
    queues: dict[str, int] = {}
    failing: list[dict[str, Any]] = []
    records = [(key, client.get(key)) for key in client.scan_iter(match=f"{PREFIX}*", count=500)]
    for key, raw in records:
        if raw is None:
            continue
        record = json.loads(raw)
        name = (key.decode() if isinstance(key, bytes) else key).removeprefix(PREFIX)
        if record.get("ready"):
            ready += 1
            for queue in record.get("queues", []):
                queues[queue] = queues.get(queue, 0) + 1
        else:
            failing.append({"process": name, "error": record.get("error", ""), "queues": record.get("queues", [])})
    return {"ready": ready, "queues": dict(sorted(queues.items())), "failing": failing}
