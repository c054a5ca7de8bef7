"""The admin's door to change governance (GOV-1, GOV-3): a save, with its inlines, is one
change through `catalog_save` (a held one says so instead of "changed"), a deletion (one
or in bulk) one through `catalog_delete`; the history page lists the versions with their
diffs and rolls back to one by making a new version."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from agentruns.admin.record import RecordAdmin
from agentruns.errors import AgentrunsError
from agentruns.models import ChangeRequest, Replay
from agentruns.policy import visible_replays
from agentruns.services.changes import (
    Saved,
    catalog_delete,
    catalog_history,
    catalog_rollback,
    catalog_save,
    change_request_approve,
    change_request_reject,
    deleted_history,
    deleted_records,
)
from agentruns.words import sentence

HELD = "agentruns_change_request"


def held_message(request: ChangeRequest) -> str:
    fields = ", ".join(request.changes)
    return (
        f"Held for approval as change request #{request.pk} ({fields}): it widens what "
        "may leave or who decides, so it is not in force until another holder of "
        "approve_change approves it in the inbox."
    )


class HeldAdmin(admin.ModelAdmin):
    """A save whose change was held answers with why, not with "changed successfully"."""

    def response_change(self, request: HttpRequest, obj: Any) -> HttpResponse:
        held = getattr(request, HELD, None)
        if held is None:
            return super().response_change(request, obj)
        self.message_user(request, held_message(held), messages.WARNING)
        return HttpResponseRedirect(request.path)


class GovernedAdmin(HeldAdmin):
    """Subclasses write in `persist_model`, never `save_model`, so the record and its
    inlines are compared and kept (or held) together."""

    kind = ""
    change_list_template = "admin/agentruns/governed_change_list.html"

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        """Deferred to `save_related`: the inlines belong to the same change."""

    def persist_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        obj = form.instance

        def save() -> Any:
            self.persist_model(request, obj, form, change)
            super(GovernedAdmin, self).save_related(request, form, formsets, change)
            return obj

        saved = catalog_save(
            kind=self.kind, pk=obj.pk if change else None, user=request.user, save=save
        )
        setattr(request, HELD, saved.change_request)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        catalog_delete(kind=self.kind, pk=obj.pk, user=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        """Each its own last version; all or none, as Django's bulk delete is."""
        with transaction.atomic():
            for pk in queryset.values_list("pk", flat=True):
                catalog_delete(kind=self.kind, pk=pk, user=request.user)

    def tell(self, request: HttpRequest, saved: Saved, done: str) -> None:
        if saved.change_request is not None:
            self.message_user(request, held_message(saved.change_request), messages.WARNING)
        else:
            self.message_user(request, done)

    def get_urls(self) -> list[URLPattern]:
        info = self.model._meta.app_label, self.model._meta.model_name
        rollback = path(
            "<int:object_id>/history/rollback/",
            self.admin_site.admin_view(self.rollback_view),
            name="{}_{}_rollback".format(*info),
        )
        deleted = path(
            "deleted/",
            self.admin_site.admin_view(self.deleted_view),
            name="{}_{}_deleted".format(*info),
        )
        return [rollback, deleted, *super().get_urls()]

    def deleted_view(self, request: HttpRequest) -> HttpResponse:
        """GOV-1: the records of this kind that were deleted, each linking its history."""
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        title = f"Deleted {self.model._meta.verbose_name_plural}"
        return self._page(request, "deleted.html", title, rows=deleted_records(kind=self.kind))

    def _page(
        self, request: HttpRequest, template: str, title: str, **context: Any
    ) -> HttpResponse:
        """One of this model's own admin pages (`admin/agentruns/page.html`)."""
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "subtitle": None,
            "opts": self.model._meta,
            **context,
        }
        return TemplateResponse(request, f"admin/agentruns/{template}", context)

    def _deleted_history_view(self, request: HttpRequest, object_id: str) -> HttpResponse | None:
        """A deleted record's versions (GOV-1), or None when the id names none."""
        if not object_id.isdigit() or not self.has_view_or_change_permission(request):
            return None
        versions = deleted_history(kind=self.kind, by="pk", key=object_id)
        if not versions:
            return None
        key = str(versions[0]["changes"].get("slug", [object_id])[0])
        title = f"History: {key} (deleted)"
        return self._page(request, "history.html", title, deleted=key, versions=versions)

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """GOV-1: the versions, newest first, each with what changed and its diffs. An id
        that names no row (a missing one, or "x") is answered as Django's own history view
        answers it: the admin's "doesn't exist" redirect, never a 500 (SEC-3); a deleted
        one's versions are still shown, the last its deletion."""
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            gone = self._deleted_history_view(request, unquote(object_id))
            return gone or super().history_view(request, object_id, extra_context)
        if not self.has_view_or_change_permission(request, obj):
            raise PermissionDenied
        opts = self.model._meta
        return self._page(
            request,
            "history.html",
            f"History: {obj}",
            object=obj,
            versions=catalog_history(obj),
            may_roll_back=self.has_change_permission(request, obj),
            rollback_url=reverse(
                f"admin:{opts.app_label}_{opts.model_name}_rollback", args=[obj.pk]
            ),
            **(extra_context or {}),
        )

    def rollback_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        obj = get_object_or_404(self.model, pk=object_id)
        if request.method != "POST" or not self.has_change_permission(request, obj):
            raise PermissionDenied
        try:
            number = int(request.POST.get("version", ""))
            saved = catalog_rollback(obj=obj, number=number, user=request.user)
        except ValueError:
            self.message_user(request, "Choose a version to roll back to.", messages.ERROR)
        except AgentrunsError as exc:
            self.message_user(request, sentence(exc), messages.ERROR)
        else:
            self.tell(request, saved, f"Rolled back to version {number}, as a new version.")
        opts = self.model._meta
        return redirect(reverse(f"admin:{opts.app_label}_{opts.model_name}_history", args=[obj.pk]))


@admin.register(ChangeRequest)
class ChangeRequestAdmin(RecordAdmin):
    """GOV-3: held changes. They are decided in the inbox or here, through the same
    service as the API (never by editing the row)."""

    list_display = ["id", "subject", "changed_fields", "requested_by", "status", "created_at"]
    list_filter = ["status", "kind"]
    search_fields = ["key"]
    actions = ["approve", "reject"]

    @admin.display(description="of", ordering="key")
    def subject(self, request: ChangeRequest) -> str:
        """Kind and key in one column, so the list fits a laptop's width (UI-7)."""
        return f"{request.kind} {request.key}"

    @admin.display(description="changes")
    def changed_fields(self, request: ChangeRequest) -> str:
        return ", ".join(request.changes)

    @admin.action(description="Approve selected change requests")
    def approve(self, request: HttpRequest, queryset: Any) -> None:
        self._decide(request, queryset, change_request_approve, "approved")

    @admin.action(description="Reject selected change requests")
    def reject(self, request: HttpRequest, queryset: Any) -> None:
        self._decide(request, queryset, change_request_reject, "rejected")

    def _decide(self, request: HttpRequest, queryset: Any, decide: Any, done: str) -> None:
        for row in queryset:
            try:
                decide(request_id=row.pk, user=request.user)
            except AgentrunsError as exc:
                self.message_user(request, f"#{row.pk}: {sentence(exc)}", messages.ERROR)
            else:
                self.message_user(request, f"Change request #{row.pk} {done}.")


@admin.register(Replay)
class ReplayAdmin(RecordAdmin):
    """GOV-4: replays, shown; started and read on the Replays page or over the API (the
    table of what changed is there), each visible only to whoever sees its runs."""

    list_display = ["id", "configuration", "created_by", "created_at", "table"]
    list_select_related = ["configuration", "created_by"]

    def visible(self, rows: QuerySet, user: Any) -> QuerySet:
        return rows.filter(pk__in=visible_replays(user).values("pk"))

    @admin.display(description="what changed")
    def table(self, replay: Replay) -> str:
        url = reverse("playground:replay", args=[replay.pk])
        return format_html('<a href="{}">replay #{} on its page</a>', url, replay.pk)
