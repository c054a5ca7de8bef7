"""The record in the admin (SEC-13, SEC-2): shown, never added, edited or deleted here, and
only what its viewer may see through the API.

Runs, threads, events, tickets, tool invocations, checkpoints, notes, gate audits and
webhook deliveries are written by the runtime and the services alone (LOOP-3); decisions
and cancels the admin offers go through those services. Retention is the documented
`manage.py prune_runs`, not a button.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from agentruns.models import GateAudit


class ReadOnly:
    """No Add, no Save, no Delete, whatever Django permission the viewer holds."""

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class RecordAdmin(ReadOnly, admin.ModelAdmin):
    """Read-only: no Add, no Save, no Delete, no delete action (Django drops
    `delete_selected` without the delete permission). `visible` filters the changelist,
    every change page and the admin's own views by SEC-2: a row the viewer may not see is
    a missing row, whatever Django `view_*` permission they hold."""

    def visible(self, rows: QuerySet, user: Any) -> QuerySet:
        return rows

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return self.visible(super().get_queryset(request), request.user)


class RecordInline(ReadOnly, admin.TabularInline):
    """Rows of the record shown inside another's page, read-only like `RecordAdmin`."""

    extra = 0
    can_delete = False


class GateAuditColumns(admin.ModelAdmin):
    """A gate decision's row in a list (CG-4, OPS-5) in six columns, so it fits a 1280 px
    window (UI-7): the verdict carries its enforcement, the source its kind, and the class
    the ceiling and zone it was weighed against. Each field is on the row's own page."""

    list_display = ["created_at", "configuration", "run_id", "decision", "source", "weighed"]

    @admin.display(description="verdict", ordering="verdict")
    def decision(self, audit: GateAudit) -> str:
        return f"{audit.verdict} ({audit.enforcement})"

    @admin.display(description="source", ordering="source_name")
    def source(self, audit: GateAudit) -> str:
        return f"{words(audit.source_kind)} {audit.source_name}".strip() or "—"

    @admin.display(description="class, ceiling (zone)", ordering="data_class")
    def weighed(self, audit: GateAudit) -> str:
        if not audit.zone:
            return audit.data_class or "—"
        return f"{audit.data_class or '—'}, {audit.ceiling} ({words(audit.zone)})"


def words(label: str) -> str:
    """`external_global` as the trust zone filters write it, and may wrap: "external global"."""
    return label.replace("_", " ")
