"""The operator's console. Edits go through the same services as the API."""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.contrib import admin
from django.contrib.admin.widgets import RelatedFieldWidgetWrapper
from django.db.models import ManyToManyField, QuerySet
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.safestring import SafeString

from agentruns import events as ev
from agentruns.admin import (  # noqa: F401  (MCP servers; webhooks, usage, audit; SCHED)
    mcp,
    ops,
    schedules,
)
from agentruns.admin.decisions import RunCancelAdminMixin, TicketDecisionAdminMixin
from agentruns.admin.governance import GovernedAdmin
from agentruns.admin.playground import PlaygroundAdminMixin
from agentruns.admin.record import GateAuditColumns, RecordAdmin, RecordInline
from agentruns.admin.tool_fields import ConfigurationAdminForm
from agentruns.errors import AgentrunsError
from agentruns.models import (
    CatalogGeneration,
    Checkpoint,
    Configuration,
    ConfigurationFallback,
    ConfigurationSkill,
    ConfigurationSnippet,
    Event,
    GateAudit,
    Note,
    Provider,
    Run,
    Skill,
    Snippet,
    Thread,
    Ticket,
    TicketApproval,
    ToolInvocation,
)
from agentruns.models.runs import NoteQuerySet, RunQuerySet, ThreadQuerySet
from agentruns.policy import of_visible_runs, of_visible_threads, visible_tickets
from agentruns.selectors import configuration_readout, run_readout
from agentruns.services.catalog import fallback_problem
from agentruns.services.changes import catalog_save
from agentruns.services.runs import run_cancel
from agentruns.services.usage import run_usage
from agentruns.throttles import RESUME, throttle_check
from agentruns.words import sentence

# UI-7: the product's name, not "Django administration".
admin.site.site_header = "agentruns"
admin.site.site_title = "agentruns admin"
admin.site.index_title = "Operations"


class ProviderAdminForm(forms.ModelForm):
    class Meta:
        model = Provider
        fields = ["extra_body"]  # the admin's fieldsets name the rest

    def clean_extra_body(self) -> Any:
        """An empty box means no flags (the form field would read it as null)."""
        value = self.cleaned_data.get("extra_body")
        return {} if value in (None, "") else value


@admin.register(Provider)
class ProviderAdmin(GovernedAdmin):
    kind = "provider"
    form = ProviderAdminForm
    # UI-7: the key's variable is on the provider's page, so the list fits 1280 px.
    list_display = ["slug", "name", "kind", "trust_zone", "base_url", "active"]
    list_filter = ["kind", "trust_zone", "active"]
    search_fields = ["slug", "name", "base_url"]
    prepopulated_fields = {"slug": ["name"]}
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "slug",
                    "name",
                    "kind",
                    "base_url",
                    "api_key_env",
                    "trust_zone",
                    "timeout_seconds",
                    "max_retries",
                    "active",
                ]
            },
        ),
        (
            "Local and other compatible servers (see Local models in the operator's guide)",
            {
                "fields": [
                    "tool_choice",
                    "max_output_tokens",
                    "context_window_tokens",
                    "extra_body",
                ]
            },
        ),
    ]


class ClassifiedAdmin(GovernedAdmin):
    list_display = ["slug", "name", "data_class", "active", "updated_at"]
    list_filter = ["data_class", "active"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    actions = ["activate", "deactivate"]

    @admin.action(description="Activate selected")
    def activate(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_active(request, queryset, True)

    @admin.action(description="Deactivate selected")
    def deactivate(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_active(request, queryset, False)

    def _set_active(self, request: HttpRequest, queryset: QuerySet, active: bool) -> None:
        for row in queryset:

            def save(row: Any = row) -> Any:
                row.active = active
                row.save(update_fields=["active", "updated_at"])
                return row

            catalog_save(kind=self.kind, pk=row.pk, user=request.user, save=save)


@admin.register(Snippet)
class SnippetAdmin(ClassifiedAdmin):
    kind = "snippet"


@admin.register(Skill)
class SkillAdmin(ClassifiedAdmin):
    kind = "skill"


class SnippetInline(admin.TabularInline):
    model = ConfigurationSnippet
    extra = 0
    autocomplete_fields = ["snippet"]
    ordering = ["position", "id"]
    verbose_name = "snippet"
    verbose_name_plural = "snippets (sent in position order)"


class SkillInline(admin.TabularInline):
    model = ConfigurationSkill
    extra = 0
    autocomplete_fields = ["skill"]
    ordering = ["position", "id"]
    verbose_name = "skill"
    verbose_name_plural = "skills (sent in position order)"


class FallbackFormSet(forms.BaseInlineFormSet):
    def clean(self) -> None:
        super().clean()
        kept = [
            form.cleaned_data
            for form in self.forms
            if form.cleaned_data and not form.cleaned_data.get("DELETE")
        ]
        kept.sort(key=lambda data: data.get("position") or 0)
        ids = [data["fallback"].pk for data in kept if data.get("fallback")]
        problem = fallback_problem(configuration_id=self.instance.pk, fallback_ids=ids)
        if problem:
            raise forms.ValidationError(problem)


class FallbackInline(admin.TabularInline):
    model = ConfigurationFallback
    fk_name = "configuration"
    formset = FallbackFormSet
    extra = 0
    autocomplete_fields = ["fallback"]
    ordering = ["position", "id"]
    verbose_name = "fallback"
    verbose_name_plural = "fallbacks (one level deep, tried in order on retryable errors)"


@admin.register(Configuration)
class ConfigurationAdmin(PlaygroundAdminMixin, GovernedAdmin):
    kind = "configuration"
    form = ConfigurationAdminForm
    list_display = ["slug", "name", "provider", "model", "max_tool_calls", "active"]
    list_filter = ["active", "provider"]
    search_fields = ["slug", "name", "model"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [SnippetInline, SkillInline, FallbackInline]
    readonly_fields = ["readout_panel"]
    fieldsets = [
        (None, {"fields": ["slug", "name", "provider", "model", "example_task", "active"]}),
        ("Context", {"fields": ["system_prompt", "system_prompt_data_class", "readout_panel"]}),
        (
            "Tools and budgets",
            {
                "fields": [
                    "allowed_tools",
                    "approval_exempt_tools",
                    "modes",
                    "delegates",
                    "max_tool_calls",
                    "tool_timeout_seconds",
                    "context_budget_tokens",
                ]
            },
        ),
        (
            "Approvals",
            {
                "fields": [
                    "approval_timeout_seconds",
                    "require_second_approver",
                    "approvals_required",
                    "approver_groups",
                    "remind_after_seconds",
                    "escalation_group",
                ]
            },
        ),
        (
            "Usage and limits",
            {"fields": ["input_token_price", "output_token_price", "daily_token_limit"]},
        ),
        ("Scripted provider", {"fields": ["script"], "classes": ["collapse"]}),
    ]

    def formfield_for_dbfield(
        self, db_field: Any, request: HttpRequest, **kwargs: Any
    ) -> forms.Field | None:
        """Delegates and approver groups are ticked from what exists: no "+" to add one
        from here (beside a checkbox list it floated next to the first box)."""
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        many = isinstance(db_field, ManyToManyField)
        if many and field is not None and isinstance(field.widget, RelatedFieldWidgetWrapper):
            field.widget.can_add_related = False
        return field

    @admin.display(description="Context readout")
    def readout_panel(self, obj: Configuration | None) -> SafeString | str:
        if obj is None or obj.pk is None:
            return "Save the configuration to see what it would send where."
        return render_to_string(
            "shared/readout.html", {"r": configuration_readout(configuration=obj)}
        )


@admin.register(GateAudit)
class GateAuditAdmin(GateAuditColumns, RecordAdmin):
    list_filter = ["verdict", "enforcement", "zone"]
    search_fields = ["configuration", "source_name"]

    def visible(self, rows: QuerySet, user: Any) -> QuerySet:
        return of_visible_runs(rows, user, run="run_id")


class EventInline(RecordInline):
    """UI-1: the run timeline, in log order, read-only (LOOP-3: the log is append-only)."""

    model = Event
    ordering = ["sequence"]
    fields = ("sequence", "type", "summary", "created_at")
    readonly_fields = fields

    @admin.display(description="payload")
    def summary(self, event: Event) -> str:
        return ev.summary(event.type, event.payload)


@admin.register(Run)
class RunAdmin(RunCancelAdminMixin, RecordAdmin):
    list_display = ["id", "configuration", "status", "created_by", "created_at", "attempts"]
    list_filter = ["status", "configuration"]
    search_fields = ["input", "final_reply"]
    readonly_fields = [
        *(field.name for field in Run._meta.fields if field.name != "id"),
        "started_by",
        "readout_panel",
        "usage",
    ]
    actions = ["cancel_runs"]

    def visible(self, rows: QuerySet, user: Any) -> QuerySet:
        return cast(RunQuerySet, rows).visible_to(user)

    def get_inlines(self, request: HttpRequest, obj: Run | None = None) -> list:
        return [RunEventInline] if obj else []

    def view_on_site(self, obj: Run) -> str:
        """The admin's "View on site" opens the run's live page (UI-2)."""
        return reverse("playground:run", args=[obj.pk])

    @admin.display(description="Started by")
    def started_by(self, obj: Run) -> SafeString:
        return render_to_string("shared/started_by.html", {"run": obj})

    @admin.display(description="Context readout")
    def readout_panel(self, obj: Run) -> SafeString:
        return render_to_string("shared/readout.html", {"r": run_readout(obj)})

    @admin.display(description="Usage")
    def usage(self, obj: Run) -> str:
        used = run_usage(obj)
        return f"{used.input_tokens} input + {used.output_tokens} output tokens = {used.cost_text}"

    @admin.action(description="Cancel selected runs")
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet) -> None:
        try:
            throttle_check(request, RESUME)  # SEC-14: one action, counted once
        except AgentrunsError as exc:
            self.message_user(request, sentence(exc), level="error")
            return
        for run in queryset:
            try:
                run_cancel(user=request.user, run_id=run.pk)
            except AgentrunsError as exc:
                self.message_user(request, f"Run {run.pk}: {sentence(exc)}", level="warning")


class RunEventInline(EventInline):
    fk_name = "run"


@admin.register(Ticket)
class TicketAdmin(TicketDecisionAdminMixin, RecordAdmin):
    """A ticket changes only by a decision (TicketDecisionAdminMixin, through run_resume)."""

    # UI-7: six columns fit 1280 px (kind and tool in one, status and who resolved it).
    list_display = ["correlation", "run", "waits_for", "state", "deadline", "origin"]
    list_filter = ["status", "kind"]
    list_select_related = ["run"]
    readonly_fields = [*(field.name for field in Ticket._meta.fields), "origin"]

    @admin.display(description="ticket", ordering="correlation_id")
    def correlation(self, obj: Ticket) -> str:
        """The correlation id's first group: the whole id wraps to five lines in a list,
        and is on the ticket's page."""
        return f"{str(obj.correlation_id)[:8]}…"

    @admin.display(description="waits for", ordering="kind")
    def waits_for(self, obj: Ticket) -> str:
        return f"{obj.get_kind_display()} {obj.tool}".strip()

    @admin.display(description="status", ordering="status")
    def state(self, obj: Ticket) -> str:
        status = obj.get_status_display()
        return f"{status} by {obj.resolved_by}" if obj.resolved_by else status

    @admin.display(description="origin")
    def origin(self, obj: Ticket) -> str:
        """DEL-4: where a child run's ticket comes from."""
        run = obj.run
        if not run.parent_id:
            return "—"
        return f"delegated by run #{run.parent_id}, in the tree of run #{run.root_id}"

    def visible(self, rows: QuerySet, user: Any) -> QuerySet:
        """SEC-2 narrowed by routing (HITL-14): the tickets the inbox would show."""
        return rows.filter(pk__in=visible_tickets(user).values("pk"))

    def view_on_site(self, obj: Ticket) -> str:
        return reverse("playground:run", args=[obj.run_id])


@admin.register(TicketApproval)
class TicketApprovalAdmin(RecordAdmin):
    """HITL-13: each allow as it arrived; written only by `run_resume`."""

    list_display = ["ticket", "user", "arguments_digest", "created_at"]
    readonly_fields = [field.name for field in TicketApproval._meta.fields]

    def visible(self, rows: QuerySet, user: Any) -> QuerySet:
        return of_visible_runs(rows, user, run="ticket__run")


@admin.register(ToolInvocation)
class ToolInvocationAdmin(RecordAdmin):
    # UI-7: the call's id is on the invocation's page (a hosted model's wraps to six lines
    # in a list that fits 1280 px); its run, turn and tool name it here.
    list_display = ["run", "turn_index", "tool", "status", "effect_sent_at", "completed_at"]
    list_filter = ["status", "tool"]
    readonly_fields = [field.name for field in ToolInvocation._meta.fields]

    def visible(self, rows: QuerySet, user: Any) -> QuerySet:
        return of_visible_runs(rows, user)


@admin.register(Note)
class NoteAdmin(RecordAdmin):
    """Written by `notes.write` in the transaction that records its result."""

    list_display = ["title", "run", "call_id", "created_at"]
    search_fields = ["title", "body"]

    def visible(self, rows: QuerySet, user: Any) -> QuerySet:
        return cast(NoteQuerySet, rows).visible_to(user)


@admin.register(Thread)
class ThreadAdmin(RecordAdmin):
    list_display = ["id", "configuration", "created_by", "created_at"]
    inlines = [EventInline]

    def visible(self, rows: QuerySet, user: Any) -> QuerySet:
        return cast(ThreadQuerySet, rows).visible_to(user)


@admin.register(Event)
class EventAdmin(RecordAdmin):
    list_display = ["thread", "sequence", "run", "type", "created_at"]
    list_filter = ["type"]
    search_fields = ["=thread__id", "=run__id"]

    def visible(self, rows: QuerySet, user: Any) -> QuerySet:
        return of_visible_threads(rows, user)


@admin.register(Checkpoint)
class CheckpointAdmin(RecordAdmin):
    list_display = ["run", "kind", "last_sequence", "created_at"]
    list_filter = ["kind"]
    search_fields = ["=run__id"]

    def visible(self, rows: QuerySet, user: Any) -> QuerySet:
        return of_visible_runs(rows, user)


@admin.register(CatalogGeneration)
class CatalogGenerationAdmin(RecordAdmin):
    list_display = ["id", "value"]
