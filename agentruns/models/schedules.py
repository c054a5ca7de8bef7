"""Schedules and triggers (SCHED-1, SCHED-2, SCHED-4): runs the system starts on a person's
behalf, at due times or on another system's signed event.

A firing's identity is (schedule, due time), unique in the database: however many sweepers
race (cluster machines, heartbeats, the minute schedule), one due time starts at most one
run. A trigger's signature is unique per trigger, so a replayed delivery starts nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from agentruns.models.catalog import Configuration
from agentruns.models.runs import Run

MIN_INTERVAL_SECONDS = 60


def zone_problem(name: str) -> str | None:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return f"Unknown time zone {name!r}; use an IANA name such as Europe/Berlin."
    return None


def cron_problem(expression: str) -> str | None:
    if len(expression.split()) != 5:
        return "A cron expression has five fields: minute hour day month weekday."
    try:
        CronSim(expression, datetime(2000, 1, 1))
    except CronSimError as exc:
        return f"Invalid cron expression: {exc}."
    return None


class Schedule(models.Model):
    """SCHED-1: a recurring run. `next_run_at` is the next due time (UTC), the row the
    sweeper reads; the owner is the initiator of every run it starts (SCHED-2)."""

    class CatchUp(models.TextChoices):
        SKIP = "skip"  # after downtime, the missed due times start nothing
        ONCE = "once"  # ...or one run for all of them

    name = models.CharField(max_length=200, unique=True)
    configuration = models.ForeignKey(Configuration, on_delete=models.PROTECT)
    input = models.TextField()
    cron = models.CharField(max_length=100, blank=True, help_text="Five fields, e.g. 0 9 * * 1-5")
    interval_seconds = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(MIN_INTERVAL_SECONDS)]
    )
    timezone = models.CharField(max_length=64, default="UTC", help_text="An IANA time zone.")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_schedules"
    )
    active = models.BooleanField(default=True)
    catch_up = models.CharField(max_length=8, choices=CatchUp.choices, default=CatchUp.SKIP)
    next_run_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(cron="") & models.Q(interval_seconds__gte=MIN_INTERVAL_SECONDS))
                | (~models.Q(cron="") & models.Q(interval_seconds__isnull=True)),
                name="schedule_cron_or_interval",
            )
        ]
        indexes = [
            models.Index(
                fields=["next_run_at"], name="schedule_due", condition=models.Q(active=True)
            )
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        """A full save (the admin's form, the API) plans the next due time from now; an
        inactive schedule has none. The sweeper moves it with a conditional update."""
        if kwargs.get("update_fields") is None:
            self.next_run_at = self.due_after(timezone.now()) if self.active else None
        super().save(*args, **kwargs)

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if bool(self.cron) == bool(self.interval_seconds):
            errors["cron"] = "Give either a cron expression or interval_seconds, not both."
        elif self.cron and (problem := cron_problem(self.cron)):
            errors["cron"] = problem
        if problem := zone_problem(self.timezone):
            errors["timezone"] = problem
        if errors:
            raise ValidationError(errors)

    def due_after(self, moment: datetime) -> datetime:
        """The first due time strictly after `moment`, in UTC. Cron fields are read in the
        schedule's time zone (09:00 Europe/Berlin stays 09:00 across summer time)."""
        if self.interval_seconds:
            return moment + timedelta(seconds=self.interval_seconds)
        local = moment.astimezone(ZoneInfo(self.timezone))
        due: datetime = next(CronSim(self.cron, local))
        return due.astimezone(ZoneInfo("UTC"))


class ScheduleFiring(models.Model):
    """One due time of one schedule: the run it started, or why it started none. The
    unique (schedule, due_at) is the firing's identity (SCHED-1)."""

    class Outcome(models.TextChoices):
        STARTED = "started"
        SKIPPED = "skipped"

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="firings")
    due_at = models.DateTimeField()
    outcome = models.CharField(max_length=8, choices=Outcome.choices)
    reason = models.CharField(max_length=300, blank=True)
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-due_at"]
        constraints = [
            models.UniqueConstraint(fields=["schedule", "due_at"], name="schedule_firing_once")
        ]

    def __str__(self) -> str:
        return f"{self.schedule_id} @ {self.due_at:%Y-%m-%d %H:%M} {self.outcome}"


class Trigger(models.Model):
    """SCHED-4: another system starts a run by POSTing a body signed with `secret`."""

    slug = models.SlugField(max_length=100, unique=True)
    configuration = models.ForeignKey(Configuration, on_delete=models.PROTECT)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_triggers"
    )
    secret = models.CharField(
        max_length=200, help_text="Signs every request (HMAC-SHA256); never shown again."
    )
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class TriggerFiring(models.Model):
    """One accepted request of a trigger. Its signature is recorded so the same request
    again starts nothing (replay refusal); the unique pair is what decides a race."""

    trigger = models.ForeignKey(Trigger, on_delete=models.CASCADE, related_name="firings")
    signature = models.CharField(max_length=64)
    signed_at = models.DateTimeField()
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(fields=["trigger", "signature"], name="trigger_signature_once")
        ]

    def __str__(self) -> str:
        return f"{self.trigger_id} {self.signature[:12]}"
