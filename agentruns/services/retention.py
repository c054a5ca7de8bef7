"""Retention (SEC-13): the record is deleted only here, by `manage.py prune_runs`, never
from a page, the admin or the API.

The unit is a thread, not a run: a live run folds its whole thread's log, so an old run's
events go only with its thread, once every run of the thread has ended and the last of
them ended before the cutoff. Each batch locks its threads (skipping any a submission or
an append holds), checks them again under the lock, and deletes the threads with their
runs, events, tickets, tool invocations, checkpoints, notes and finished webhook
deliveries. Gate audit rows (names and classes, never text) and daily usage stay: they
are the audit and the limits' counters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.db.models import Count, Max, Q, QuerySet

from agentruns.models import (
    Checkpoint,
    Event,
    Note,
    Run,
    Thread,
    Ticket,
    ToolInvocation,
    WebhookDelivery,
)

LIVE = [s for s in Run.Status.values if s not in Run.TERMINAL]


@dataclass
class PruneSummary:
    before: datetime
    dry_run: bool
    batches: int = 0
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, counts: dict[str, int]) -> None:
        self.batches += 1
        for name, n in counts.items():
            self.counts[name] = self.counts.get(name, 0) + n

    def sentence(self) -> str:
        done = "Would delete" if self.dry_run else "Deleted"
        parts = ", ".join(f"{self.counts.get(name, 0)} {name}" for name in HANGING)
        return f"{done} {parts} (threads ended before {self.before.isoformat()})."


def prunable_threads(before: datetime) -> QuerySet[Thread]:
    """Threads with no live run whose last run ended (or, with no run, that began) before
    `before`."""
    return (
        Thread.objects.annotate(
            last_change=Max("runs__updated_at"),
            live=Count("runs", filter=Q(runs__status__in=LIVE)),
        )
        .filter(live=0)
        .filter(Q(last_change__lt=before) | Q(last_change__isnull=True, created_at__lt=before))
    )


def _hanging(ids: list[int]) -> dict[str, QuerySet]:
    """What goes with the threads `ids`, children first (each delete then has nothing
    left to cascade to, and a note would otherwise outlive its run as nobody's)."""
    return {
        "notes": Note.objects.filter(run__thread_id__in=ids),
        "webhook deliveries": WebhookDelivery.objects.filter(thread_id__in=ids).exclude(
            status=WebhookDelivery.Status.PENDING
        ),
        "events": Event.objects.filter(thread_id__in=ids),
        "checkpoints": Checkpoint.objects.filter(run__thread_id__in=ids),
        "tool invocations": ToolInvocation.objects.filter(run__thread_id__in=ids),
        "tickets": Ticket.objects.filter(thread_id__in=ids),
        "runs": Run.objects.filter(thread_id__in=ids),
        "threads": Thread.objects.filter(pk__in=ids),
    }


HANGING = list(_hanging([]))


def _prune_batch(before: datetime, ids: list[int], dry_run: bool) -> dict[str, int]:
    with transaction.atomic():
        locked = list(
            Thread.objects.select_for_update(skip_locked=True)
            .filter(pk__in=ids)
            .values_list("pk", flat=True)
        )
        # Checked again under the lock: a run may have been added since the batch was read.
        still = list(prunable_threads(before).filter(pk__in=locked).values_list("pk", flat=True))
        rows = _hanging(still)
        if dry_run:
            return {name: query.count() for name, query in rows.items()}
        return {
            name: query.delete()[1].get(query.model._meta.label, 0) for name, query in rows.items()
        }


def runs_prune(*, before: datetime, dry_run: bool = False, batch_size: int = 500) -> PruneSummary:
    """Delete (or, dry, count) what `prunable_threads(before)` names, `batch_size` threads
    per transaction, so no batch holds many locks or much memory for long."""
    summary = PruneSummary(before=before, dry_run=dry_run)
    after = 0
    while True:
        ids = list(
            prunable_threads(before)
            .filter(pk__gt=after)
            .order_by("pk")
            .values_list("pk", flat=True)[:batch_size]
        )
        if not ids:
            return summary
        summary.add(_prune_batch(before, ids, dry_run))
        after = ids[-1]
