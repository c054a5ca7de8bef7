"""CLU-1, CLU-4: a wake-up is a django-q2 task carrying only a run id, enqueued through the
ORM broker inside the caller's transaction, so it commits (or vanishes) with the change."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone
from django_q.tasks import async_task

from agentruns.models import Run

WAKE_TASK = "agentruns.cluster.tasks.wake"


def enqueue_wake(run_id: int) -> str:
    if transaction.get_autocommit():
        raise RuntimeError("enqueue_wake must run inside the transaction that needs it")
    task_id = async_task(WAKE_TASK, run_id)
    Run.objects.filter(pk=run_id).update(wake_task_id=task_id, wake_enqueued_at=timezone.now())
    return task_id
