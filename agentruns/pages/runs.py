"""The runs a viewer may see (SEC-2) and one run's page, live (UI-2, UI-3)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from agentruns.selectors import visible_runs


@login_required
def run_list(request: HttpRequest) -> HttpResponse:
    runs = visible_runs(request.user).order_by("-created_at", "-id")[:50]
    return render(request, "pages/runs.html", {"runs": runs})


@login_required
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(visible_runs(request.user), pk=run_id)
    return render(request, "pages/run.html", {"run": run})
