"""The playground's form (FS, UI-3, UI-6): one form for the playground page and the
configuration admin's "Run with forced sources", read into the services' `Submission`;
and what the form shows beside it, the readout (CG-10) of exactly what the run would
carry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django import forms
from django.contrib import messages
from django.http import HttpRequest, QueryDict

from agentruns.errors import AgentrunsError
from agentruns.models import Configuration, Run, Skill, Snippet
from agentruns.selectors import configuration_readout, mode_names, start_form
from agentruns.services.runs import Submission, run_submit
from agentruns.throttles import SUBMIT, throttle_check
from agentruns.words import field_errors, sentence

T = TypeVar("T")

# The services' field names, as the form calls them.
FORM_FIELD = {"input": "task", "forced_snippets": "snippets", "forced_skills": "skills"}


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

    def start(self, request: HttpRequest) -> Run | None:
        """Run: the run `run_submit` started, under the API's submission rate (SEC-14)."""

        def submit(submission: Submission) -> Run:
            throttle_check(request, SUBMIT)
            return run_submit(user=request.user, submission=submission)[0]

        return self.attempt(request, submit)

    def show_error(self, error: AgentrunsError) -> None:
        for name, problems in field_errors(error).items():
            field = FORM_FIELD.get(name, name)
            for problem in problems:
                self.add_error(field if field in self.fields else None, problem)


def chosen(data: QueryDict, name: str) -> set[int]:
    return {int(v) for v in data.getlist(name) if v.isdigit()}


def form_context(
    form: PlaygroundForm, data: QueryDict, *, as_typed: bool = False
) -> dict[str, Any]:
    """The form's lists and the readout (CG-10) of exactly what this run would carry. A
    fresh form preselects a configuration that works offline, with a task to run, and a
    change of configuration brings its example task unless the user typed their own
    (UI-7); `as_typed` keeps the task as posted (the form that ran or dry-ran it)."""
    configurations = list(
        Configuration.objects.filter(active=True).select_related("provider").order_by("slug")
    )
    typed = data.get("task")
    start = start_form(configurations, slug=data.get("configuration"), typed=typed)
    configuration = start.configuration
    snippet_ids, skill_ids = chosen(data, "snippets"), chosen(data, "skills")
    context: dict[str, Any] = {
        "form": form,
        "choices": start.choices,
        "configuration": configuration,
        "needs": next(
            (c.needs for c in start.choices if configuration and c.slug == configuration.slug),
            "",
        ),
        "snippets": Snippet.objects.filter(active=True).order_by("slug"),
        "skills": Skill.objects.filter(active=True).order_by("slug"),
        "snippet_ids": snippet_ids,
        "skill_ids": skill_ids,
        "task": (typed or "") if as_typed else start.task,
        "typed": typed,
        "mode": data.get("mode", ""),
        "modes": [],
        "readout": None,
    }
    if configuration is not None:
        context["modes"] = mode_names(configuration)
        context["readout"] = configuration_readout(
            configuration=configuration,
            forced_snippet_ids=sorted(snippet_ids),
            forced_skill_ids=sorted(skill_ids),
        )
    return context
