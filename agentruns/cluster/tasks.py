"""django-q2 task entry points. Arguments are ids only (they are pickled and signed).

CLU-1: a wake-up carries a run id and nothing else; the run row decides what happens, so a
duplicate, stale or late wake-up is harmless.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import transaction

from agentruns.cluster.driver import CLAIM_BATCH, get_driver
from agentruns.cluster.sweeper import sweep as run_sweeper
from agentruns.models import Run
from agentruns.store.base import claimable
from agentruns.store.connection import close_thread_connections
from agentruns.store.wakeups import enqueue_wake

logger = logging.getLogger(__name__)

CLAIMED = "claimed"
NOT_CLAIMABLE = "not_claimable"
DEFERRED = "deferred"


def block_seconds() -> float:
    """How long a wake-up waits for a free executor thread: half of q2's timeout, so it
    always returns well before q2 would kill the worker process (and its runs)."""
    q: dict[str, Any] = settings.Q_CLUSTER
    return float(q.get("timeout") or 60) / 2


def wake(run_id: int) -> str:
    """Claim the run (a short transaction) and hand it to this process's driver; return
    at once so the q2 worker can take the next wake-up."""
    if settings.Q_CLUSTER.get("sync"):
        from agentruns.runtime.loop import execute_run

        return str(execute_run(run_id))
    driver = get_driver()
    try:
        if not driver.reserve(block_seconds()):
            return _defer(run_id)
        if driver.claim_reserved(run_id):
            logger.debug("run %s claimed", run_id)
            outcome = CLAIMED
        else:
            outcome = _not_claimed(run_id)
        # PERF-6: with threads to spare, a burst of queued runs in one statement instead
        # of one wake-up round trip each.
        driver.claim_free(CLAIM_BATCH)
        return outcome
    finally:
        close_thread_connections()


def _defer(run_id: int) -> str:
    """Backpressure: every thread of this process is busy. Put the wake-up back (the run
    stays queued, no attempt spent) for whichever worker frees up first."""
    with transaction.atomic():
        runnable = (
            Run.objects.select_for_update(skip_locked=True)
            .filter(pk=run_id)
            .filter(claimable())
            .exists()
        )
        if runnable:
            enqueue_wake(run_id)
    return DEFERRED


def _not_claimed(run_id: int) -> str:
    """`claim` skips a row another transaction holds (SKIP LOCKED). If that left the run
    queued (a cancel or a sweep held it, not another claim), wake it again."""
    with transaction.atomic():
        status = (
            Run.objects.select_for_update()
            .filter(pk=run_id)
            .values_list("status", flat=True)
            .first()
        )
        if status == Run.Status.QUEUED:
            enqueue_wake(run_id)
            return DEFERRED
    return NOT_CLAIMABLE


def sweep() -> dict[str, Any]:
    """The django-q2 schedule's entry (CLU-3); workers also sweep on their heartbeat."""
    get_driver()
    try:
        report = run_sweeper()
    finally:
        close_thread_connections()
    return {
        "expired_leases": report.expired_leases,
        "lost_wakeups": report.lost_wakeups,
        "tickets_expired": report.tickets_expired,
        "timers_fired": report.timers_fired,
        "schedules_fired": report.schedules_fired,
    }
