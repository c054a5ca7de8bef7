"""The tool playground (FS, UI-2, UI-3, UI-6): staff with `agentruns.use_playground` only
(FS-5). The form is a plain POST; htmx refreshes the readout as boxes are ticked, and
without JavaScript an "Update readout" button posts the form to show it (a POST, so the
CSRF token never lands in a URL: UI-7). htmx posts the form to the readout for the same
reason, and because the form carries the task, which is no URL's business either."""

from __future__ import annotations

from functools import wraps
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from agentruns.forms.playground import PlaygroundForm, form_context
from agentruns.policy import may_use_playground, visible_runs
from agentruns.services.runs import run_dry
from playground import inspector as inspect
from playground.polls import poll
from playground.runs import live_response, visible_children, visible_forks


def playground_only(view: Any) -> Any:
    @login_required
    @wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not may_use_playground(request.user):
            raise PermissionDenied("The playground is for staff with the playground permission.")
        return view(request, *args, **kwargs)

    return guarded


@playground_only
def playground(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        data = request.GET
        return render(request, "playground/playground.html", form_context(PlaygroundForm(), data))
    if request.POST.get("action") == "readout":
        return render(
            request, "playground/playground.html", form_context(PlaygroundForm(), request.POST)
        )
    form = PlaygroundForm(request.POST)
    if request.POST.get("action") == "dry":
        dry = form.attempt(request, lambda s: run_dry(user=request.user, submission=s))
        if dry is not None:
            context = {**form_context(form, request.POST, as_typed=True), "dry": dry}
            return render(request, "playground/playground.html", context)
    else:
        run = form.start(request)
        if run is not None:
            messages.success(request, f"Run #{run.pk} started; it fills in below as it goes.")
            return redirect("playground:inspector", run_id=run.pk)
    context = form_context(form, request.POST, as_typed=True)
    return render(request, "playground/playground.html", context, status=400)


@playground_only
def readout(request: HttpRequest) -> HttpResponse:
    """The readout panel (and the mode list, and the task box when it held another
    configuration's example) for what is ticked now; htmx posts the form and swaps it in."""
    data = request.POST if request.method == "POST" else request.GET
    return render(
        request, "playground/_playground_readout.html", form_context(PlaygroundForm(), data)
    )


@playground_only
def inspector(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(visible_runs(request.user), pk=run_id)
    context = {
        **inspect.inspector_context(run),
        "forks": visible_forks(request.user, run),
        "children": visible_children(request.user, run),
    }
    return render(request, "playground/inspector.html", context)


@poll
@playground_only
def inspector_live(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(visible_runs(request.user), pk=run_id)
    context = inspect.inspector_context(run)
    return live_response(request, "playground/_inspector_live.html", run, context)
