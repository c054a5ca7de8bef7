"""SCHED-1 and SCHED-2: schedules fire each due time at most once, on the owner's behalf,
re-checking the owner at each firing, recording skips, with a catch-up policy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from agentruns.cluster.sweeper import sweep
from agentruns.models import Run, Schedule, ScheduleFiring, Ticket
from agentruns.runtime.loop import execute_run
from agentruns.services.schedules import LIVE, schedule_fire, schedule_skips, schedules_fire_due
from tests.conftest import grant
from tests.support.catalog import scripted_configuration
from tests.support.concurrency import at_once
from tests.support.hitl import active_ticket, allow, client_for, resume, write_call

WRITE = [{"tool_calls": [write_call("scheduled", call_id="call_w")]}, {"text": "done"}]


def make_schedule(owner, configuration, name="morning", **kw) -> Schedule:
    kw.setdefault("interval_seconds", 3600)
    return Schedule.objects.create(
        name=name, configuration=configuration, input="the morning report", owner=owner, **kw
    )


def due(schedule: Schedule, ago: float) -> datetime:
    """Make the schedule's next due time `ago` seconds in the past (as after a wait)."""
    moment = timezone.now() - timedelta(seconds=ago)
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=moment)
    return moment


@pytest.mark.django_db(transaction=True)
def test_sched1_racing_sweepers_start_each_of_10_due_firings_exactly_once(member):
    """Two clusters' heartbeat sweeps and the minute schedule, at the same instant."""
    configuration = scripted_configuration("racing", [{"text": "ok"}])
    schedules = [make_schedule(member, configuration, name=f"s{i}") for i in range(10)]
    for schedule in schedules:
        due(schedule, 5)
    started = at_once(3, schedules_fire_due)
    assert sum(started) == 10
    assert Run.objects.count() == 10
    firings = ScheduleFiring.objects.filter(outcome=ScheduleFiring.Outcome.STARTED)
    assert sorted(firings.values_list("schedule_id", flat=True)) == [s.pk for s in schedules]
    assert not ScheduleFiring.objects.filter(outcome=ScheduleFiring.Outcome.SKIPPED).exists()


@pytest.mark.django_db
def test_sched1_a_due_time_already_fired_starts_nothing_again(member):
    """A sweeper that read an old next_run_at (or a re-planned schedule landing on the same
    due time) meets the firing's identity in the database."""
    schedule = make_schedule(member, scripted_configuration("again", [{"text": "ok"}]))
    moment = due(schedule, 5)
    assert schedule_fire(schedule_id=schedule.pk) == 1
    Run.objects.update(status=Run.Status.COMPLETED)
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=moment)
    assert schedule_fire(schedule_id=schedule.pk) == 0
    assert Run.objects.count() == 1
    schedule.refresh_from_db()
    assert schedule.next_run_at is not None and schedule.next_run_at > timezone.now()


@pytest.mark.django_db
def test_sched1_the_sweeper_fires_due_schedules_and_plans_the_next(member):
    schedule = make_schedule(member, scripted_configuration("swept", [{"text": "ok"}]))
    assert schedule.next_run_at is not None  # planned on save, an interval from now
    assert sweep().schedules_fired == 0
    due(schedule, 1)
    assert sweep().schedules_fired == 1
    run = Run.objects.get()
    assert run.trigger["kind"] == "schedule" and run.trigger["id"] == schedule.pk
    assert run.created_by == member and run.input == "the morning report"
    schedule.refresh_from_db()
    assert schedule.next_run_at > timezone.now() + timedelta(seconds=3500)


@pytest.mark.django_db
@pytest.mark.parametrize(("policy", "runs"), [("skip", 0), ("once", 1)])
def test_sched2_after_downtime_skip_starts_nothing_and_once_starts_one(member, policy, runs):
    """The cluster was down across three due times of an hourly schedule."""
    configuration = scripted_configuration(f"down-{policy}", [{"text": "ok"}])
    schedule = make_schedule(member, configuration, catch_up=policy)
    due(schedule, 3 * 3600 - 60)
    assert schedule_fire(schedule_id=schedule.pk) == runs
    assert Run.objects.count() == runs
    skips = schedule_skips(schedule)
    assert len(skips) == 3 - runs
    assert all("missed" in skip["reason"] for skip in skips)
    schedule.refresh_from_db()
    assert timezone.now() < schedule.next_run_at < timezone.now() + timedelta(hours=1)


@pytest.mark.django_db
def test_sched2_a_scheduled_run_parks_for_approval_and_four_eyes_counts_the_owner(member):
    configuration = scripted_configuration("audit", WRITE, require_second_approver=True)
    owner = grant(member, "approve_run")
    schedule = make_schedule(owner, configuration)
    due(schedule, 1)
    assert schedule_fire(schedule_id=schedule.pk) == 1
    run = Run.objects.get()
    assert execute_run(run.pk) == "awaiting"  # a schedule approves nothing
    ticket = active_ticket(run.pk)
    response = resume(client_for(owner), run.pk, allow(ticket))
    assert response.status_code == 403
    assert response.json()["code"] == "self_approval"
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.ACTIVE


@pytest.mark.django_db
def test_sched2_a_deactivated_owners_firing_is_skipped_with_the_reason(member):
    schedule = make_schedule(member, scripted_configuration("revoked", [{"text": "ok"}]))
    member.is_active = False
    member.save()
    due(schedule, 1)
    assert schedule_fire(schedule_id=schedule.pk) == 0
    assert not Run.objects.exists()
    [skip] = schedule_skips(schedule)
    assert "deactivated" in skip["reason"]


@pytest.mark.django_db
def test_sched2_a_firing_due_while_the_previous_run_is_live_is_skipped(member):
    schedule = make_schedule(member, scripted_configuration("busy", WRITE))
    due(schedule, 1)
    assert schedule_fire(schedule_id=schedule.pk) == 1
    assert execute_run(Run.objects.get().pk) == "awaiting"
    due(schedule, 1)
    assert schedule_fire(schedule_id=schedule.pk) == 0
    assert Run.objects.count() == 1
    assert schedule_skips(schedule)[0]["reason"] == LIVE


@pytest.mark.django_db
def test_sched2_an_inactive_configuration_is_a_recorded_skip(member):
    configuration = scripted_configuration("paused", [{"text": "ok"}])
    schedule = make_schedule(member, configuration)
    configuration.active = False
    configuration.save()
    due(schedule, 1)
    assert schedule_fire(schedule_id=schedule.pk) == 0
    assert "inactive" in schedule_skips(schedule)[0]["reason"]


@pytest.mark.django_db
def test_sched1_cron_is_read_in_the_schedules_time_zone(member):
    configuration = scripted_configuration("tz", [{"text": "ok"}])
    schedule = make_schedule(
        member, configuration, interval_seconds=None, cron="0 9 * * *", timezone="Europe/Berlin"
    )
    winter = schedule.due_after(datetime(2026, 1, 10, 12, tzinfo=UTC))
    summer = schedule.due_after(datetime(2026, 7, 10, 12, tzinfo=UTC))
    assert winter == datetime(2026, 1, 11, 8, tzinfo=UTC)
    assert summer == datetime(2026, 7, 11, 7, tzinfo=UTC)
