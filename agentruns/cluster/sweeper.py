"""The sweeper (CLU-3, HITL-7): what makes a crashed, paused or forgotten run move again.

It runs as a django-q2 schedule (`agentruns.cluster.tasks.sweep`, once a minute) and,
opportunistically, on every worker process's heartbeat (every lease/3), so recovery never
waits for the schedule. Sweeps may overlap: every re-enqueue happens under the run's row
lock after re-checking what was seen, so two sweepers never enqueue twice for one loss.

- A `running` run whose lease expired lost its worker: a fresh wake-up lets any worker
  reclaim it; the claim spends one attempt (only such crash reclaims do).
- A `queued` run whose wake-up is gone (its `wake_queue_id` names no live row in the ORM
  broker's queue) lost its wake-up: it gets a new one. A row taken by a cluster longer ago
  than q2's task timeout, whose run is still queued, counts as gone: that cluster died
  holding it (q2 itself would only redeliver it after `retry`).
- Tickets past their deadline resolve as denials with reason `expired` (HITL-7).
- Open tickets are reminded and escalated, each once (HITL-15, `services.reminders`).
- Due timers answer their `agent.wait` calls (SCHED-3, `services.timers`).
- Due schedules fire (SCHED-1, `services.schedules`): each due time at most once, however
  many sweepers race.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django_q.models import OrmQ

from agentruns.models import Run
from agentruns.services.reminders import tickets_remind_and_escalate
from agentruns.services.resume import ticket_expire_due
from agentruns.services.schedules import schedules_fire_due
from agentruns.services.timers import timers_due
from agentruns.store.base import lease_expired
from agentruns.store.wakeups import enqueue_wake

logger = logging.getLogger(__name__)

# A wake-up younger than this is not looked for in the queue yet (it is nearly always
# being delivered); it only spares the sweeper reading the queue while runs flow.
LOST_GRACE_SECONDS = 1.0


@dataclass
class SweepReport:
    expired_leases: list[int] = field(default_factory=list)
    lost_wakeups: list[int] = field(default_factory=list)
    tickets_expired: int = 0
    tickets_reminded: int = 0
    tickets_escalated: int = 0
    schedules_fired: int = 0
    timers_fired: int = 0

    @property
    def changed(self) -> bool:
        return bool(
            self.expired_leases
            or self.lost_wakeups
            or self.tickets_expired
            or self.tickets_reminded
            or self.tickets_escalated
            or self.schedules_fired
            or self.timers_fired
        )


def q_timeouts() -> tuple[float, float]:
    q: dict[str, Any] = settings.Q_CLUSTER
    return float(q.get("timeout") or 60), float(q.get("retry") or 60)


def live_wake_rows() -> set[int]:
    """The ORM broker's rows that will still be delivered: waiting rows, and rows a
    cluster took less than q2's timeout ago."""
    timeout, retry = q_timeouts()
    now = timezone.now()
    # A taken row is locked until taken_at + retry; taken more than `timeout` ago means
    # locked until before now + (retry - timeout).
    stale_before = now + timedelta(seconds=retry - timeout)
    return {
        pk
        for pk, lock in OrmQ.objects.values_list("id", "lock")
        if lock is None or not now < lock < stale_before
    }


def _requeue(pk: int, seen_row: int | None, condition: Q) -> bool:
    """Enqueue a wake-up for the run if it is still as the sweeper saw it."""
    with transaction.atomic():
        still = (
            Run.objects.select_for_update(skip_locked=True)
            .filter(condition, pk=pk, wake_queue_id=seen_row)
            .exists()
        )
        if still:
            enqueue_wake(pk)
        return still


def requeue_expired_leases(limit: int = 500, live: set[int] | None = None) -> list[int]:
    candidates = list(
        Run.objects.filter(lease_expired())
        .order_by("lease_expires_at")
        .values_list("pk", "wake_queue_id")[:limit]
    )
    if not candidates:
        return []
    live = live_wake_rows() if live is None else live
    return [pk for pk, row in candidates if row not in live and _requeue(pk, row, lease_expired())]


def lost_candidates() -> Q:
    grace = timezone.now() - timedelta(seconds=LOST_GRACE_SECONDS)
    return Q(status=Run.Status.QUEUED) & (
        Q(wake_enqueued_at__lt=grace) | Q(wake_enqueued_at__isnull=True)
    )


def requeue_lost_wakeups(limit: int = 500, live: set[int] | None = None) -> list[int]:
    queued = Q(status=Run.Status.QUEUED)
    candidates = list(
        Run.objects.filter(lost_candidates())
        .order_by("wake_enqueued_at")
        .values_list("pk", "wake_queue_id")[:limit]
    )
    if not candidates:
        return []
    live = live_wake_rows() if live is None else live
    return [pk for pk, row in candidates if row not in live and _requeue(pk, row, queued)]


def sweep(limit: int = 500) -> SweepReport:
    report = SweepReport()
    live: set[int] | None = None
    if Run.objects.filter(lease_expired() | lost_candidates()).exists():
        live = live_wake_rows()
        report.expired_leases = requeue_expired_leases(limit, live)
        report.lost_wakeups = requeue_lost_wakeups(limit, live)
    try:
        report.tickets_expired = ticket_expire_due()
    except Exception:
        logger.exception("expiring tickets failed")
    try:
        report.tickets_reminded, report.tickets_escalated = tickets_remind_and_escalate()
    except Exception:
        logger.exception("reminding and escalating tickets failed")
    try:
        report.timers_fired = timers_due()
    except Exception:
        logger.exception("answering due timers failed")
    try:
        report.schedules_fired = schedules_fire_due()
    except Exception:
        logger.exception("firing schedules failed")
    if report.changed:
        logger.info(
            "sweeper: re-enqueued %s expired leases %s, %s lost wake-ups %s; %s tickets "
            "expired, %s reminded, %s escalated; %s timers and %s schedules fired",
            len(report.expired_leases),
            report.expired_leases[:20],
            len(report.lost_wakeups),
            report.lost_wakeups[:20],
            report.tickets_expired,
            report.tickets_reminded,
            report.tickets_escalated,
            report.timers_fired,
            report.schedules_fired,
        )
    return report
