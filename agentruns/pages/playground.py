"""The tool playground (FS, UI-2, UI-3): staff with `agentruns.use_playground` only (FS-5)."""

from __future__ import annotations

from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from agentruns.selectors import may_use_playground


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
    return render(request, "pages/playground.html", {})
