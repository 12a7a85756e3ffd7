"""The workers' side of signed messages: a task runs only if its message was signed with the signing key.

A message the broker holds may have been written by anyone with the broker's password. Before a task's body
runs, its base class checks the signature over the task's name and arguments (shared/security/signing.py); a
message without one, or with a wrong one, is rejected without requeueing (acknowledged: it leaves the broker),
never run nor retried, logged by its task name and id only, and counted on /metrics.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Task
from celery.exceptions import Reject

from shared.security.signing import SIGNATURE_HEADER, verify
from workers import metrics

log = logging.getLogger("mnemoflow.worker")


class VerifiedTask(Task):
    """The base of every task of the workers' app: refuses a message whose signature does not hold."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        request = self.request
        # A task called as a function (a test, a task calling another's body) came through no broker.
        if not (request.called_directly or request.is_eager):
            key = self.app.amqp.signing_key
            why = "this worker has no signing key" if key is None else None
            why = why or verify(key, getattr(request, SIGNATURE_HEADER, None), str(request.id), self.name, args, kwargs)
            if why is not None:
                log.warning("refused message %s for %s: %s", request.id, self.name, why)
                metrics.REFUSED.labels(task=self.name, reason=why).inc()
                raise Reject(f"refused: {why}", requeue=False)
        return super().__call__(*args, **kwargs)
