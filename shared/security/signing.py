"""Task messages signed with a key the broker never holds: HMAC-SHA256 over the task's id, name, args and kwargs.

A process that can write to the broker (its password is enough) can push any message; without the signing key it
cannot make one a worker runs. The signature covers what the task does (its name and arguments) and the message's
id, which names a scheduled decay's run: a replayed message is the same message again, and every task is
idempotent under redelivery. Delivery details are not covered; a re-sent message (a retry, the sweeper's) is
signed afresh by its sender.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from typing import Any

SIGNATURE_HEADER = "mnemoflow_signature"
# The version names the scheme: a worker refuses a message signed by another one rather than guess.
SCHEME = "v1"


def canonical(task_id: str, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> bytes:
    """The bytes signed: the same on both sides of the broker, whatever order the JSON arrives in.

    `default=str` renders what kombu's JSON carries as types of its own (UUIDs, datetimes) the way the sender's
    objects render, so both ends agree."""
    return json.dumps(
        [task_id, name, list(args), dict(kwargs)],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=str,
    ).encode("utf-8")


def sign(key: bytes, task_id: str, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """The signature header's value for message `task_id` of task `name`, called with `args` and `kwargs`."""
    digest = hmac.new(key, canonical(task_id, name, args, kwargs), hashlib.sha256).hexdigest()
    return f"{SCHEME}:{digest}"


def verify(
    key: bytes, signature: object, task_id: str, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> str | None:
    """Why the message cannot be trusted (for the log: it names no argument), or None when the signature holds."""
    if not isinstance(signature, str) or not signature:
        return "unsigned"
    if not signature.startswith(f"{SCHEME}:"):
        return "signed with an unknown scheme"
    if not hmac.compare_digest(signature, sign(key, task_id, name, args, kwargs)):
        return "bad signature"
    return None
