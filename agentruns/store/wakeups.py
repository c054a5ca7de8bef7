"""CLU-1, CLU-4: a wake-up is a django-q2 task carrying only a run id, enqueued through the
ORM broker inside the caller's transaction, so it commits (or vanishes) with the change."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone
from django_q.brokers import Broker, get_broker
from django_q.tasks import async_task

from agentruns.models import Run

WAKE_TASK = "agentruns.cluster.tasks.wake"


class _Recorded:
    """Hands the signed task to the configured broker and keeps the queue row's id, which
    `async_task` drops: the run records it so that its claim can delete the row."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.row_id: int | None = None

    @property
    def list_key(self) -> str:
        return self.broker.list_key

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
    return recorded.row_id
