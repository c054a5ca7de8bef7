"""The configuration admin's way into the playground (issue 12): "Try in playground" with
the configuration preselected, and "Run with forced sources", for staff with
`agentruns.use_playground` (FS-5). Both go through the same form and services as the
playground page."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from agentruns.forms.playground import PlaygroundForm, form_context
from agentruns.models import Configuration
from agentruns.policy import may_use_playground


class PlaygroundAdminMixin(admin.ModelAdmin):
    change_form_template = "admin/agentruns/configuration/change_form.html"

    def get_urls(self) -> list[URLPattern]:
        run = path(
            "<int:object_id>/run/",
            self.admin_site.admin_view(self.run_forced_view),
            name="agentruns_configuration_run",
        )
        return [run, *super().get_urls()]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        extra = {**(extra_context or {}), "may_use_playground": may_use_playground(request.user)}
        return super().change_view(request, object_id, form_url, extra)

    def run_forced_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        configuration = get_object_or_404(Configuration, pk=object_id)
        if not may_use_playground(request.user):
            raise PermissionDenied
        data = request.POST.copy() if request.method == "POST" else request.GET.copy()
        data["configuration"] = configuration.slug
        # "Update readout" posts the form too (UI-7: no CSRF token in a URL) and runs nothing.
        submitting = request.method == "POST" and data.get("action") != "readout"
        form = PlaygroundForm(data if submitting else None)
        if submitting:
            run = form.start(request)
            if run is not None:
                submission = form.submission()
                forced = submission.forced_snippets or submission.forced_skills
                how = "with the forced sources" if forced else "without forced sources"
                messages.success(request, f"Run #{run.pk} started {how}.")
                return redirect(reverse("playground:inspector", args=[run.pk]))
        ctx = form_context(form, data)
        context = {
            **self.admin_site.each_context(request),
            **ctx,
            "opts": self.model._meta,
            "original": configuration,
            "title": f"Run {configuration.slug} with forced sources",
            "groups": [
                {
                    "legend": "Force snippets",
                    "noun": "snippets",
                    "items": ctx["snippets"],
                    "ids": ctx["snippet_ids"],
                },
                {
                    "legend": "Force skills",
                    "noun": "skills",
                    "items": ctx["skills"],
                    "ids": ctx["skill_ids"],
                },
            ],
        }
        return TemplateResponse(request, "admin/agentruns/configuration/run_forced.html", context)
