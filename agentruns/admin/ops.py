"""The admin's share of operating (OPS-1, OPS-4, OPS-5): webhooks and their deliveries,
daily usage, and the audit export as an action. Imported from `agentruns.admin`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import admin
from django.db import models
from django.db.models import Max, Min, QuerySet
from django.http import HttpRequest, StreamingHttpResponse

from agentruns.admin.governance import GovernedAdmin
from agentruns.admin.record import GateAuditColumns, RecordAdmin, RecordInline
from agentruns.models import AuditRecord, DailyUsage, Webhook, WebhookAttempt, WebhookDelivery
from agentruns.policy import may_export_audit, of_visible_threads
from agentruns.services.audit import AuditFilter, audit_response
from agentruns.services.usage import day_usage


class WriteOnlySecretMixin:
    """A `secret` that signs (a webhook's deliveries, a trigger's requests) is typed once
    and never shown again (SEC-9); an edit that leaves it empty keeps the one it has."""

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kw: Any
    ) -> Any:
        form = super().get_form(request, obj, change=change, **kw)  # type: ignore[misc]
        if "secret" in form.base_fields:
            form.base_fields["secret"].widget = forms.PasswordInput(render_value=False)
            form.base_fields["secret"].required = obj is None
        return form

    def get_exclude(self, request: HttpRequest, obj: Any = None) -> Any:
        # A page its viewer may not change shows every field as text: never the secret.
        excluded = super().get_exclude(request, obj)  # type: ignore[misc]
        if not self.has_change_permission(request, obj):  # type: ignore[attr-defined]
            return [*(excluded or ()), "secret"]
        return excluded

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if change and not form.cleaned_data.get("secret"):
            obj.secret = type(obj).objects.values_list("secret", flat=True).get(pk=obj.pk)
        if obj.created_by_id is None:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)  # type: ignore[misc]


@admin.register(Webhook)
class WebhookAdmin(WriteOnlySecretMixin, GovernedAdmin):
    kind = "webhook"
    list_display = ["url", "events", "trust_zone", "active", "created_by", "created_at"]
    list_filter = ["active", "trust_zone"]
    readonly_fields = ["created_by", "created_at", "updated_at"]
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}


class AttemptInline(RecordInline):
    model = WebhookAttempt
    fields = ("at", "status_code", "latency_ms", "error")
    readonly_fields = fields


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(RecordAdmin):
    """A delivery carries its event's payload: seen like the event (SEC-2)."""

    # UI-7: six columns fit 1280 px: the event with its place, the status with its tries;
    # the whole delivery id and the last error are on the delivery's page.
    list_display = ["delivery", "webhook", "event", "state", "next_attempt_at", "withheld_kinds"]
    list_filter = ["status", "event_type"]
    list_select_related = ["webhook"]
    inlines = [AttemptInline]

    @admin.display(description="delivery", ordering="delivery_id")
    def delivery(self, row: WebhookDelivery) -> str:
        return f"{str(row.delivery_id)[:8]}…"

    @admin.display(description="event", ordering="event_type")
    def event(self, row: WebhookDelivery) -> str:
        of = f"run {row.run_id}" if row.run_id else f"thread {row.thread_id}"
        return f"{row.event_type} #{row.sequence} of {of}"

    @admin.display(description="status", ordering="status")
    def state(self, row: WebhookDelivery) -> str:
        if not row.attempts:
            return row.get_status_display()
        code = f", last {row.last_status_code}" if row.last_status_code else ""
        return f"{row.get_status_display()} after {row.attempts} attempt(s){code}"

    @admin.display(description="withheld")
    def withheld_kinds(self, row: WebhookDelivery) -> str:
        return ", ".join(row.withheld) or "—"

    def visible(self, rows: QuerySet, user: Any) -> QuerySet:
        return of_visible_threads(rows, user, thread="thread_id")


@admin.register(WebhookAttempt)
class WebhookAttemptAdmin(RecordAdmin):
    list_display = ["at", "delivery", "status_code", "latency_ms", "error"]
    list_filter = ["status_code"]

    def visible(self, rows: QuerySet, user: Any) -> QuerySet:
        return of_visible_threads(rows, user, thread="delivery__thread_id")


@admin.register(DailyUsage)
class DailyUsageAdmin(RecordAdmin):
    """OPS-2's counters, a configuration's day in up to 32 shard rows (their sum is the
    day's): deleting a row would lift the limit by its tokens."""

    list_display = ["day", "configuration", "shard", "input_tokens", "output_tokens", "cost"]
    list_filter = ["day", "configuration"]
    date_hierarchy = "day"

    @admin.display(description="cost")
    def cost(self, row: DailyUsage) -> str:
        return day_usage(row).cost_text


def _period(queryset: QuerySet[AuditRecord]) -> AuditFilter:
    bounds = queryset.aggregate(start=Min("created_at"), end=Max("created_at"))
    end = bounds["end"] + timedelta(microseconds=1) if bounds["end"] else None
    return AuditFilter(start=bounds["start"], end=end)


@admin.register(AuditRecord)
class AuditRecordAdmin(GateAuditColumns, RecordAdmin):
    """OPS-5 in the admin: select gate decisions and export the whole audit (decisions,
    approvals, denials, expiries, redactions, cancels) of the period they span. Whoever
    may export the audit sees all of it (`may_export_audit`)."""

    # UI-7: what one selects a period by; each row's class and zone are on its page.
    list_display = ["created_at", "configuration", "run_id", "decision", "source"]
    list_filter = ["verdict", "enforcement"]
    actions = ["export_csv", "export_jsonl"]

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return may_export_audit(request.user)

    @admin.action(description="Export the audit of the selected rows' period (CSV)")
    def export_csv(self, request: HttpRequest, queryset: QuerySet) -> StreamingHttpResponse:
        return audit_response(_period(queryset), "csv")

    @admin.action(description="Export the audit of the selected rows' period (JSON lines)")
    def export_jsonl(self, request: HttpRequest, queryset: QuerySet) -> StreamingHttpResponse:
        return audit_response(_period(queryset), "jsonl")
