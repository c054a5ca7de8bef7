"""The operator's console. Edits go through the same services as the API."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils.safestring import SafeString

from agentruns.models import (
    Configuration,
    ConfigurationFallback,
    ConfigurationSkill,
    ConfigurationSnippet,
    GateAudit,
    Provider,
    Skill,
    Snippet,
)
from agentruns.selectors import configuration_readout
from agentruns.services.catalog import fallback_problem


@admin.register(Provider)
class ProviderAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "kind", "trust_zone", "base_url", "api_key_env", "active"]
    list_filter = ["kind", "trust_zone", "active"]
    search_fields = ["slug", "name", "base_url"]
    prepopulated_fields = {"slug": ["name"]}


class ClassifiedAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "data_class", "active", "updated_at"]
    list_filter = ["data_class", "active"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    actions = ["activate", "deactivate"]

    @admin.action(description="Activate selected")
    def activate(self, request: HttpRequest, queryset: QuerySet) -> None:
        for row in queryset:
            row.active = True
            row.save(update_fields=["active", "updated_at"])

    @admin.action(description="Deactivate selected")
    def deactivate(self, request: HttpRequest, queryset: QuerySet) -> None:
        for row in queryset:
            row.active = False
            row.save(update_fields=["active", "updated_at"])


admin.site.register(Snippet, ClassifiedAdmin)
admin.site.register(Skill, ClassifiedAdmin)


class SnippetInline(admin.TabularInline):
    model = ConfigurationSnippet
    extra = 0
    autocomplete_fields = ["snippet"]
    ordering = ["position", "id"]


class SkillInline(admin.TabularInline):
    model = ConfigurationSkill
    extra = 0
    autocomplete_fields = ["skill"]
    ordering = ["position", "id"]


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
    verbose_name = "fallback (one level deep, tried in order on retryable errors)"


@admin.register(Configuration)
class ConfigurationAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "provider", "model", "max_tool_calls", "active"]
    list_filter = ["active", "provider"]
    search_fields = ["slug", "name", "model"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [SnippetInline, SkillInline, FallbackInline]
    readonly_fields = ["readout_panel"]
    fieldsets = [
        (None, {"fields": ["slug", "name", "provider", "model", "active"]}),
        ("Context", {"fields": ["system_prompt", "system_prompt_data_class", "readout_panel"]}),
        (
            "Tools and budgets",
            {
                "fields": [
                    "allowed_tools",
                    "approval_exempt_tools",
                    "modes",
                    "max_tool_calls",
                    "context_budget_tokens",
                ]
            },
        ),
        ("Approvals", {"fields": ["approval_timeout_seconds", "require_second_approver"]}),
        ("Scripted provider", {"fields": ["script"], "classes": ["collapse"]}),
    ]

    @admin.display(description="Context readout (CG-10)")
    def readout_panel(self, obj: Configuration | None) -> SafeString | str:
        if obj is None or obj.pk is None:
            return "Save the configuration to see what it would send where."
        return render_to_string(
            "admin/agentruns/readout.html", {"r": configuration_readout(configuration=obj)}
        )


@admin.register(GateAudit)
class GateAuditAdmin(admin.ModelAdmin):
    list_display = [
        "created_at",
        "configuration",
        "run_id",
        "verdict",
        "mode",
        "zone",
        "ceiling",
        "source_kind",
        "source_name",
        "data_class",
    ]
    list_filter = ["verdict", "mode", "zone"]
    search_fields = ["configuration", "source_name"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
