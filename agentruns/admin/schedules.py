"""Schedules and triggers in the admin (SCHED-5): each with its next firing, its last runs
and its skips. A trigger's secret is write-only like a webhook's."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from agentruns.admin.ops import WriteOnlySecretMixin
from agentruns.admin.record import RecordAdmin
from agentruns.models import Schedule, ScheduleFiring, Trigger, TriggerFiring
from agentruns.words import when

SHOWN = 10


def _run_link(run_id: int | None) -> Any:
    if run_id is None:
        return "—"
    return format_html(
        '<a href="{}">run #{}</a>', reverse("admin:agentruns_run_change", args=[run_id]), run_id
    )


def _table(rows: list[tuple[Any, ...]], empty: str) -> SafeString:
    """Times in rows come as `words.when` puts them (UI-7): a bare datetime would print
    as Python writes it."""
    if not rows:
        return format_html("<p>{}</p>", empty)
    body = format_html_join(
        "",
        "<tr>{}</tr>",
        ((format_html_join("", "<td>{}</td>", ((c,) for c in row)),) for row in rows),
    )
    return format_html("<table>{}</table>", body)


class OwnerMixin:
    """Runs start as the owner (SCHED-2): only a superuser may name someone else."""

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))  # type: ignore[misc]
        return fields if request.user.is_superuser else [*fields, "owner"]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if not change and not request.user.is_superuser:
            obj.owner = request.user
        if obj.created_by_id is None:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)  # type: ignore[misc]


@admin.register(Schedule)
class ScheduleAdmin(OwnerMixin, admin.ModelAdmin):
    list_display = ["name", "configuration", "when", "owner", "active", "next_run_at", "last_run"]
    list_filter = ["active", "configuration"]
    search_fields = ["name"]
    readonly_fields = ["next_run_at", "last_runs", "skips", "created_by", "created_at"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Schedule]:
        return super().get_queryset(request).select_related("configuration", "owner")

    @admin.display(description="When")
    def when(self, obj: Schedule) -> str:
        if obj.cron:
            return f"{obj.cron} ({obj.timezone})"
        return f"every {obj.interval_seconds} s"

    @admin.display(description="Last run")
    def last_run(self, obj: Schedule) -> Any:
        started = obj.firings.filter(outcome=ScheduleFiring.Outcome.STARTED)
        return _run_link(started.values_list("run_id", flat=True).first())

    @admin.display(description="Last runs")
    def last_runs(self, obj: Schedule) -> SafeString:
        rows = obj.firings.filter(outcome=ScheduleFiring.Outcome.STARTED).select_related("run")[
            :SHOWN
        ]
        return _table(
            [
                (when(row.due_at), _run_link(row.run_id), row.run.status if row.run else "—")
                for row in rows
            ],
            "No run yet.",
        )

    @admin.display(description="Skips")
    def skips(self, obj: Schedule) -> SafeString:
        rows = obj.firings.filter(outcome=ScheduleFiring.Outcome.SKIPPED)[:SHOWN]
        return _table([(when(row.due_at), row.reason) for row in rows], "No skips.")


@admin.register(Trigger)
class TriggerAdmin(WriteOnlySecretMixin, OwnerMixin, admin.ModelAdmin):
    list_display = ["slug", "configuration", "owner", "active", "created_at"]
    list_filter = ["active", "configuration"]
    readonly_fields = ["last_runs", "created_by", "created_at"]

    @admin.display(description="Last runs")
    def last_runs(self, obj: Trigger) -> SafeString:
        rows = TriggerFiring.objects.filter(trigger=obj).select_related("run")[:SHOWN]
        return _table(
            [
                (when(row.created_at), _run_link(row.run_id), row.run.status if row.run else "—")
                for row in rows
            ],
            "No run yet.",
        )


@admin.register(ScheduleFiring)
class ScheduleFiringAdmin(RecordAdmin):
    """Each due time and what came of it: the firings' history, never edited."""

    list_display = ["schedule", "due_at", "outcome", "reason", "run", "created_at"]
    list_filter = ["outcome", "schedule"]


@admin.register(TriggerFiring)
class TriggerFiringAdmin(RecordAdmin):
    """Each accepted signed request (its signature, so a replay starts nothing; shown on
    the firing's page, a 64-digit digest being too wide for the list, UI-7)."""

    list_display = ["trigger", "signed_at", "run", "created_at"]
    list_filter = ["trigger"]
