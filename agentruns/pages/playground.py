"""The tool playground (FS, UI-2, UI-3, UI-6): staff with `agentruns.use_playground` only
(FS-5). The form is a plain POST; htmx refreshes the readout as boxes are ticked, and
without JavaScript an "Update readout" button does the same with a GET."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render

from agentruns.errors import AgentrunsError
from agentruns.models import Configuration, Skill, Snippet
from agentruns.pages import inspector as inspect
from agentruns.pages.runs import HtmxHttpRequest, live_response
from agentruns.pages.words import field_errors, sentence
from agentruns.runtime.config import build_runtime_config
from agentruns.selectors import configuration_readout, may_use_playground, visible_runs
from agentruns.services.runs import Submission, run_dry, run_submit

T = TypeVar("T")

# The services' field names, as the form calls them.
FORM_FIELD = {"input": "task", "forced_snippets": "snippets", "forced_skills": "skills"}


def playground_only(view: Any) -> Any:
    @login_required
    @wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not may_use_playground(request.user):
            raise PermissionDenied("The playground is for staff with the playground permission.")
        return view(request, *args, **kwargs)

    return guarded


class PlaygroundForm(forms.Form):
    configuration = forms.ModelChoiceField(
        Configuration.objects.filter(active=True).order_by("slug"), to_field_name="slug"
    )
    snippets = forms.ModelMultipleChoiceField(Snippet.objects.all(), required=False)
    skills = forms.ModelMultipleChoiceField(Skill.objects.all(), required=False)
    task = forms.CharField(required=False, strip=False)
    mode = forms.CharField(required=False)

    def submission(self) -> Submission:
        data = self.cleaned_data
        return Submission(
            configuration=data["configuration"].slug,
            input=data["task"],
            mode=data["mode"] or None,
            forced_snippets=tuple(s.pk for s in data["snippets"]),
            forced_skills=tuple(s.pk for s in data["skills"]),
        )

    def attempt(self, request: HttpRequest, service: Callable[[Submission], T]) -> T | None:
        """The service's answer for a valid form; else None, with the errors on the form
        and the error's sentence as a message."""
        if not self.is_valid():
            return None
        try:
            return service(self.submission())
        except AgentrunsError as error:
            self.show_error(error)
            messages.error(request, sentence(error))
            return None

    def show_error(self, error: AgentrunsError) -> None:
        for name, problems in field_errors(error).items():
            field = FORM_FIELD.get(name, name)
            for problem in problems:
                self.add_error(field if field in self.fields else None, problem)


def chosen(data: QueryDict, name: str) -> set[int]:
    return {int(v) for v in data.getlist(name) if v.isdigit()}


def form_context(form: PlaygroundForm, data: QueryDict) -> dict[str, Any]:
    """The form's lists and the readout (CG-10) of exactly what this run would carry."""
    configurations = list(Configuration.objects.filter(active=True).order_by("slug"))
    slug = data.get("configuration") or (configurations[0].slug if configurations else "")
    configuration = next((c for c in configurations if c.slug == slug), None)
    snippet_ids, skill_ids = chosen(data, "snippets"), chosen(data, "skills")
    context: dict[str, Any] = {
        "form": form,
        "configurations": configurations,
        "configuration": configuration,
        "snippets": Snippet.objects.filter(active=True).order_by("slug"),
        "skills": Skill.objects.filter(active=True).order_by("slug"),
        "snippet_ids": snippet_ids,
        "skill_ids": skill_ids,
        "task": data.get("task", ""),
        "mode": data.get("mode", ""),
        "modes": [],
        "readout": None,
    }
    if configuration is not None:
        context["modes"] = [m.name for m in build_runtime_config(configuration).modes]
        context["readout"] = configuration_readout(
            configuration=configuration,
            forced_snippet_ids=sorted(snippet_ids),
            forced_skill_ids=sorted(skill_ids),
        )
    return context


@playground_only
def playground(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        data = request.GET
        return render(request, "pages/playground.html", form_context(PlaygroundForm(), data))
    form = PlaygroundForm(request.POST)
    if request.POST.get("action") == "dry":
        dry = form.attempt(request, lambda s: run_dry(user=request.user, submission=s))
        if dry is not None:
            context = {**form_context(form, request.POST), "dry": dry}
            return render(request, "pages/playground.html", context)
    else:
        run = form.attempt(request, lambda s: run_submit(user=request.user, submission=s)[0])
        if run is not None:
            messages.success(request, f"Run #{run.pk} started; it fills in below as it goes.")
            return redirect("pages:inspector", run_id=run.pk)
    context = form_context(form, request.POST)
    return render(request, "pages/playground.html", context, status=400)


@playground_only
def readout(request: HttpRequest) -> HttpResponse:
    """The readout panel (and the mode list) for what is ticked now; htmx swaps it in."""
    return render(
        request, "pages/_playground_readout.html", form_context(PlaygroundForm(), request.GET)
    )


@playground_only
def inspector(request: HtmxHttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(visible_runs(request.user), pk=run_id)
    context = inspect.inspector_context(run)
    if request.htmx:
        return live_response(request, "pages/_inspector_live.html", run, context)
    return render(request, "pages/inspector.html", context)
