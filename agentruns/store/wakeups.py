"""CLU-1, CLU-4: a wake-up is a django-q2 task carrying only a run id, enqueued through the
ORM broker inside the caller's transaction, so it commits (or vanishes) with the change.

On PostgreSQL the same transaction also notifies WAKE_CHANNEL, so a worker listening there
claims the run as soon as it commits (PERF-5) instead of when q2's pusher next polls its
queue. The notification carries nothing: PostgreSQL folds a transaction's identical
notifications into one, so a burst of a thousand submissions wakes each listener once."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.utils import timezone
from django_q.brokers import Broker, get_broker
from django_q.tasks import async_task

from agentruns.models import Run
from agentruns.store import on_postgres

WAKE_TASK = "agentruns.cluster.tasks.wake"
WAKE_CHANNEL = "agentruns_wake"
# How often a listener looks at its stop flag while nothing is enqueued.
LISTEN_SECONDS = 0.5

logger = logging.getLogger(__name__)


class _Recorded:
    """Hands the signed task to the configured broker and keeps the queue row's id, which
    `async_task` drops: the run records it so that its claim can delete the row."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.row_id: int | None = None

    @property
    def list_key(self) -> str:
        key: str = self.broker.list_key
        return key

    def enqueue(self, task: Any) -> int:
        self.row_id = self.broker.enqueue(task)
        return self.row_id


def enqueue_wake(run_id: int) -> int | None:
    """The queue row's id (None when q2 runs tasks synchronously)."""
    if transaction.get_autocommit():
        raise RuntimeError("enqueue_wake must run inside the transaction that needs it")
    recorded = _Recorded(get_broker())
    async_task(WAKE_TASK, run_id, broker=recorded)
    Run.objects.filter(pk=run_id).update(
        wake_queue_id=recorded.row_id, wake_enqueued_at=timezone.now()
    )
    if on_postgres():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, '')", [WAKE_CHANNEL])
    return recorded.row_id


def wake_notices(stop: threading.Event) -> Iterator[None]:
    """Yield once when the listening connection is ready (for what was enqueued before it
    listened), then once per batch of notifications that arrived while the caller was
    busy, until `stop` is set. A lost connection is opened again after a pause (a
    restarting database). Where the database has no notifications (SQLite), nothing."""
    if not on_postgres():
        return
    params = connections[DEFAULT_DB_ALIAS].get_connection_params()
    while not stop.is_set():
        try:
            with psycopg.connect(**params, autocommit=True) as listening:
                listening.execute(f"LISTEN {WAKE_CHANNEL}")
                yield
                while not stop.is_set():
                    if any(True for _ in listening.notifies(timeout=LISTEN_SECONDS, stop_after=1)):
                        yield
        except psycopg.Error:
            logger.warning("wake-up notifications lost; listening again", exc_info=True)
            stop.wait(LISTEN_SECONDS)
