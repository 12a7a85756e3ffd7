"""The Celery configuration both sides share: queues declared explicitly, routing by sector, JSON only; and the
one way a message is sent (the messages themselves are `shared.jobs`'s)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import redis
from celery import Celery
from celery.app.amqp import AMQP
from kombu import Exchange
from kombu import Queue as KombuQueue
from kombu.transport.redis import Channel as RedisChannel

from shared.backpressure import PRIORITY_STEPS
from shared.config import Settings
from shared.jobs import ALL_QUEUES, DEFAULT_QUEUE, Message, Queue
from shared.security.signing import SIGNATURE_HEADER, sign

LONG_QUEUES = frozenset(q for q in ALL_QUEUES if q.startswith("embed.") or q == "ingest")


def route_task(name: str, args: Any, kwargs: Any, options: dict[str, Any], task: Any = None, **kw: Any) -> dict:
    """Send each task to its declared queue; refuse a destination that does not exist."""
    queue = options.get("queue") or DEFAULT_QUEUE.get(name)
    if isinstance(queue, KombuQueue):  # Celery may pass an explicit queue already expanded
        queue = queue.name
    queue = str(queue) if queue is not None else None
    if queue is None:
        raise ValueError(f"task {name} has no queue: pass queue=embed.<sector> or add it to DEFAULT_QUEUE")
    if queue not in ALL_QUEUES:
        raise ValueError(f"task {name} routed to undeclared queue {queue!r}; declared: {', '.join(ALL_QUEUES)}")
    return {"queue": queue, "routing_key": queue}


def celery_config(settings: Settings) -> dict[str, Any]:
    if not settings.redis_url:
        raise RuntimeError("REDIS_URL is not set; start the stack with `mnemoflow up` or set it")
    exchange = Exchange("mnemoflow", type="direct")
    return {
        "broker_url": settings.redis_url,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": transport_options(settings),
        "task_queues": [KombuQueue(q, exchange, routing_key=q) for q in ALL_QUEUES],
        "task_default_exchange": "mnemoflow",
        # Never used for routing (route_task names every task's queue); a declared one, so that Flower, which lists
        # this and the declared queues until it knows the workers', shows no queue that does not exist.
        "task_default_queue": Queue.MAINTENANCE.value,
        "task_create_missing_queues": False,
        "task_routes": (route_task,),
        "task_serializer": "json",
        "accept_content": ["json"],
        "result_serializer": "json",
        "task_ignore_result": True,  # job state lives in PostgreSQL
        "task_acks_late": True,  # safe only because every task is idempotent
        "task_reject_on_worker_lost": True,
        # Below the visibility timeout (the settings check it), so a task is killed before Redis would hand its
        # message to another worker; the soft limit leaves it time to record the failure.
        "task_time_limit": settings.task_time_limit_seconds,
        "task_soft_time_limit": settings.soft_time_limit,
        "worker_prefetch_multiplier": 1,
        # A pool process may retry its start-up this long (workers/app.py) before the pool gives up on it.
        "worker_proc_alive_timeout": settings.worker_start_seconds + 30,
        "worker_send_task_events": True,  # for Flower
        # A "task-sent" event is one more publish per send: measured at ~4 ms on every query that
        # enqueues its reinforcement. Flower still sees every task from the workers' events.
        "task_send_sent_event": False,
        "worker_hijack_root_logger": False,
        "timezone": "UTC",
    }


def transport_options(settings: Settings) -> dict[str, Any]:
    """The Redis transport's options: the visibility timeout, and one list per priority (shared/backpressure.py)."""
    # Longer than the longest task, or Redis re-delivers a message still being worked on.
    return {"visibility_timeout": settings.broker_visibility_timeout, "priority_steps": list(PRIORITY_STEPS)}


class SigningAMQP(AMQP):
    """Signs every task message its app sends, however it is sent (`send`, a retry, beat's schedule), with the
    signing key (None: unsigned, and a worker refuses them)."""

    signing_key: bytes | None = None

    def as_task_v2(
        self, task_id: str, name: str, args: Any = None, kwargs: Any = None, *rest: Any, **options: Any
    ) -> Any:
        # Celery passes the rest positionally (countdown, eta, ...): passed on as they came.
        message = super().as_task_v2(task_id, name, args, kwargs, *rest, **options)
        if self.signing_key is not None:
            message.headers[SIGNATURE_HEADER] = sign(self.signing_key, task_id, name, args or (), kwargs or {})
        return message


def make_celery(settings: Settings, name: str = "mnemoflow", task_cls: str | None = None) -> Celery:
    """A Celery app configured for Mnemoflow (the gateway uses it only to send tasks by name), signing what it
    sends when it has the key. `task_cls`: the base of the tasks it defines (the workers' verifies signatures)."""
    app = Celery(name, amqp=SigningAMQP, **({"task_cls": task_cls} if task_cls else {}))
    app.conf.update(celery_config(settings))
    app.amqp.signing_key = settings.signing_secret()
    return app


def send(celery: Celery, *messages: Message, countdown: float | None = None) -> None:
    """Send each message to its task (by name) on its queue, to run `countdown` seconds from now if given. Raises
    when the broker does: the caller decides what an outage means (the gateway logs it and leaves the job to the
    sweeper).

    A message whose task runs on several queues (a chunk, on its sector's) travels under a display name naming
    the queue (Celery's `shadow`): Flower, the task events and the worker's log then tell the sectors apart,
    while the worker still runs the task of the message's real name. Each goes at its own broker priority
    (`Message.priority`, shared/backpressure.py)."""
    for message in messages:
        celery.send_task(
            message.task,
            kwargs=message.kwargs(),
            queue=message.queue,
            shadow=message.display_name,
            countdown=countdown,
            priority=message.priority,
        )


def broker_keys(queue: str, transport_options: Mapping[str, Any]) -> list[str]:
    """The Redis lists holding a queue's messages. kombu's Redis transport keeps one list per priority step: the
    queue's own name for priority 0 and `<queue><sep><priority>` for the others, under `global_keyprefix`."""
    sep = transport_options.get("sep", RedisChannel.sep)
    prefix = transport_options.get("global_keyprefix", "")
    steps = transport_options.get("priority_steps", RedisChannel.priority_steps)
    return [prefix + (f"{queue}{sep}{step}" if step else queue) for step in steps]


def unacked_key(transport_options: Mapping[str, Any]) -> str:
    """The Redis hash of the messages workers have taken and not yet acknowledged (running or reserved)."""
    return transport_options.get("global_keyprefix", "") + transport_options.get(
        "unacked_key", RedisChannel.unacked_key
    )


def queue_lengths(
    client: redis.Redis, queues: Sequence[str], transport_options: Mapping[str, Any]
) -> tuple[dict[str, int], int]:
    """Messages waiting in each queue (every priority list summed), and messages taken but not acknowledged; one
    round trip."""
    pipeline = client.pipeline(transaction=False)
    keys = {queue: broker_keys(queue, transport_options) for queue in queues}
    for queue_keys in keys.values():
        for key in queue_keys:
            pipeline.llen(key)
    pipeline.hlen(unacked_key(transport_options))
    answers = iter(pipeline.execute())
    depths = {queue: sum(int(next(answers)) for _ in queue_keys) for queue, queue_keys in keys.items()}
    return depths, int(next(answers))
