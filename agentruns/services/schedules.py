"""Firing schedules (SCHED-1, SCHED-2): the sweeper's share of recurring work.

Each due schedule is fired in its own short transaction under its row lock (`SKIP LOCKED`:
a sweeper on another machine already holds it). The row lock orders sweepers; the unique
(schedule, due_at) of `ScheduleFiring` is the identity that decides even a sweeper that
read an old `next_run_at`: a due time starts at most one run, however many sweepers race.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from agentruns.errors import AgentrunsError
from agentruns.models import Run, Schedule, ScheduleFiring
from agentruns.policy import may_act_as
from agentruns.services.runs import Submission, run_start_on_behalf

logger = logging.getLogger(__name__)

# Due times enumerated per firing at most: a minute schedule down for a week has ~10,000;
# past this bound the schedule is re-planned from now and the rest count as one skip.
MAX_DUE_TIMES = 1000
# Missed due times recorded one by one (the API shows the latest 20).
SKIPS_RECORDED = 20

MISSED = "missed: nothing was sweeping at the due time (catch_up {policy})"
LIVE = "the schedule's previous run is still live"


def grace() -> timedelta:
    """A due time older than this when the sweeper sees it was missed (downtime)."""
    return timedelta(seconds=settings.AGENTRUNS_SCHEDULE_GRACE_SECONDS)


def schedules_fire_due(*, now: datetime | None = None, limit: int = 100) -> int:
    """Fire every due schedule; the number of runs started."""
    now = now or timezone.now()
    due = Schedule.objects.filter(active=True, next_run_at__lte=now).order_by("next_run_at")
    return sum(
        schedule_fire(schedule_id=pk, now=now)
        for pk in list(due.values_list("pk", flat=True)[:limit])
    )


def schedule_fire(*, schedule_id: int, now: datetime | None = None) -> int:
    """The due times of one schedule up to `now`: on-time ones start a run (or record
    why not), missed ones follow the catch-up policy; `next_run_at` moves past `now`."""
    now = now or timezone.now()
    with transaction.atomic():
        schedule = (
            Schedule.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("configuration", "owner")
            .filter(pk=schedule_id, active=True, next_run_at__lte=now)
            .first()
        )
        if schedule is None or schedule.next_run_at is None:
            return 0  # another sweeper holds it or fired it first
        due, later = _due_times(schedule, schedule.next_run_at, now)
        on_time = [d for d in due if now - d <= grace()]
        missed = [d for d in due if now - d > grace()]
        started = 0
        if missed and not on_time and schedule.catch_up == Schedule.CatchUp.ONCE:
            on_time = [missed.pop()]
        policy = MISSED.format(policy=schedule.catch_up)
        _record_skips(schedule, missed[-SKIPS_RECORDED:], policy)
        for moment in on_time:
            started += _fire_one(schedule, moment)
        Schedule.objects.filter(pk=schedule.pk).update(next_run_at=later)
    return started


def _due_times(
    schedule: Schedule, first: datetime, now: datetime
) -> tuple[list[datetime], datetime]:
    """The due times from `first` up to `now`, and the next one after `now`."""
    due: list[datetime] = []
    moment = first
    while moment <= now and len(due) < MAX_DUE_TIMES:
        due.append(moment)
        moment = schedule.due_after(moment)
    if moment <= now:  # far behind: plan from now; what was skipped is past counting
        moment = schedule.due_after(now)
    return due, moment


def _record_skips(schedule: Schedule, moments: list[datetime], reason: str) -> None:
    ScheduleFiring.objects.bulk_create(
        [
            ScheduleFiring(
                schedule=schedule,
                due_at=moment,
                outcome=ScheduleFiring.Outcome.SKIPPED,
                reason=reason,
            )
            for moment in moments
        ],
        ignore_conflicts=True,  # a due time already decided stays as it was decided
    )


def _fire_one(schedule: Schedule, due: datetime) -> int:
    """One due time: a run, or a skip saying why none started. 1 if a run started."""
    if ScheduleFiring.objects.filter(schedule=schedule, due_at=due).exists():
        return 0
    reason = may_act_as(schedule.owner) or _live_run(schedule)
    run: Run | None = None
    if reason is None:
        submission = Submission(configuration=schedule.configuration.slug, input=schedule.input)
        trigger = {
            "kind": "schedule",
            "id": schedule.pk,
            "name": schedule.name,
            "due": due.isoformat(),
        }
        try:
            with transaction.atomic():
                run = run_start_on_behalf(
                    owner=schedule.owner, submission=submission, trigger=trigger
                )
                ScheduleFiring.objects.create(
                    schedule=schedule, due_at=due, outcome=ScheduleFiring.Outcome.STARTED, run=run
                )
        except IntegrityError:
            return 0  # the identity says this due time was decided elsewhere
        except AgentrunsError as exc:
            reason = exc.detail
    if run is not None:
        logger.info("schedule %s (%s): run %s for %s", schedule.pk, schedule.name, run.pk, due)
        return 1
    assert reason is not None
    logger.info("schedule %s (%s): skipped %s: %s", schedule.pk, schedule.name, due, reason)
    _record_skips(schedule, [due], reason)
    return 0


def _live_run(schedule: Schedule) -> str | None:
    live = ScheduleFiring.objects.filter(
        schedule=schedule,
        run__status__in=[Run.Status.QUEUED, Run.Status.RUNNING, Run.Status.AWAITING],
    )
    return LIVE if live.exists() else None


def schedule_skips(schedule: Schedule, limit: int = SKIPS_RECORDED) -> list[dict[str, Any]]:
    """SCHED-1: the latest skips, newest first."""
    rows = schedule.firings.filter(outcome=ScheduleFiring.Outcome.SKIPPED)[:limit]
    return [{"due": row.due_at.isoformat(), "reason": row.reason} for row in rows]
